/* The adversary of a concurrent mark: threads keep moving the only pointer
 * to each live block between places a mark reads at different times (a
 * global array, a heap array, a chain of heap nodes, a thread's stack), and
 * keep replacing blocks with new ones (free the old, allocate a new) and
 * relinking chains, all the time a scan runs. Exactly the five blocks dropped
 * at the start may be reported: a block moved from a place not yet read to
 * one already read must not look leaked, nor one freed and reallocated
 * meanwhile. */
#include <pthread.h>
#include <stdint.h>

#include "../../scan/programs/scenario.h"

#define THREADS 4
#define SLOTS 4096

static void *g_slots[SLOTS];  /* in .bss */
static void **h_slots;        /* a heap array, far from .bss */
static void **chain;          /* a linked list of nodes, each holding one block */
static unsigned chain_len;    /* nodes are never freed: bounded */

static unsigned step(unsigned *x) {
  *x = *x * 1103515245u + 12345u;
  return *x >> 8;
}

/* Hold a block only on this thread's stack for a while. */
__attribute__((noinline)) static void hold_on_stack(unsigned i) {
  void *volatile on_stack = __atomic_exchange_n(&g_slots[i], NULL, __ATOMIC_ACQ_REL);
  for (volatile int k = 0; k < 2000; k++) {
  }
  void *back = on_stack;
  void *old = __atomic_exchange_n(&g_slots[i], back, __ATOMIC_ACQ_REL);
  if (old) free(old); /* another thread put one there meanwhile */
}

static void *move(void *arg) {
  unsigned x = (unsigned)(uintptr_t)arg * 2654435761u + 7;
  for (;;) {
    unsigned r = step(&x), i = r % SLOTS, j = step(&x) % SLOTS;
    switch (r % 5) {
      case 0: { /* global <-> heap array: swap the only pointers */
        void *a = __atomic_exchange_n(&g_slots[i], NULL, __ATOMIC_ACQ_REL);
        void *b = __atomic_exchange_n(&h_slots[j], a, __ATOMIC_ACQ_REL);
        void *old = __atomic_exchange_n(&g_slots[i], b, __ATOMIC_ACQ_REL);
        if (old) free(old);
        break;
      }
      case 1: { /* replace: free the old block, a new one in its place */
        void *n = malloc(16 + step(&x) % 600);
        void *old = __atomic_exchange_n(&h_slots[j], n, __ATOMIC_ACQ_REL);
        free(old);
        break;
      }
      case 2: { /* heap array -> a chain node's payload and back elsewhere */
        void **node = __atomic_load_n(&chain, __ATOMIC_ACQUIRE);
        for (unsigned k = step(&x) % 64; k && node; k--) node = node[0];
        if (!node) break;
        void *a = __atomic_exchange_n(&h_slots[j], NULL, __ATOMIC_ACQ_REL);
        void *b = __atomic_exchange_n(&node[1], a, __ATOMIC_ACQ_REL);
        void *old = __atomic_exchange_n(&h_slots[j], b, __ATOMIC_ACQ_REL);
        if (old) free(old);
        break;
      }
      case 3:
        hold_on_stack(i);
        break;
      default: { /* a new node at the chain's head, holding a new block */
        if (__atomic_fetch_add(&chain_len, 1, __ATOMIC_RELAXED) >= 20000) break;
        void **node = malloc(2 * sizeof(void *));
        node[1] = malloc(24);
        node[0] = __atomic_load_n(&chain, __ATOMIC_ACQUIRE);
        while (!__atomic_compare_exchange_n(&chain, (void **)&node[0], node, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
        }
        break;
      }
    }
  }
  return NULL;
}

__attribute__((noinline)) static void drop(void) {
  for (int i = 0; i < 5; i++) KEEP(malloc(2000 + (size_t)i));
}

int main(void) {
  h_slots = calloc(SLOTS, sizeof(void *));
  if (!h_slots) return 1;
  for (unsigned i = 0; i < SLOTS; i++) {
    g_slots[i] = malloc(40);
    h_slots[i] = malloc(56);
  }
  drop();
  wipe();
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, move, (void *)i);
  ready("leak_count=5 leak_bytes=%d", 2000 + 2001 + 2002 + 2003 + 2004);
  wait_for_test();
  return 0;
}
