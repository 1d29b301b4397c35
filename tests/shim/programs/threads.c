/* Several threads allocate and free at once; afterwards the registry, read
 * through malloc_iterate, holds exactly what the program holds, and
 * malloc_usable_size answers each block's requested size. Each thread's
 * slot records its stack, and turns EXITED when the thread ends. */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "shimtest.h"

#define THREADS 6
#define LIVE 2000
#define ROUNDS 20000

struct held {
  void *p[LIVE];
  size_t size[LIVE];
};
static struct held held[THREADS];
static struct ur_thread_slot *slots[THREADS];
static int stack_ok[THREADS];
static atomic_int go;

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  struct held *h = &held[t];
  unsigned seed = (unsigned)t * 7919u + 1;
  while (!atomic_load(&go)) {
  }
  for (int r = 0; r < ROUNDS; r++) {
    int i = (int)(rand_r(&seed) % LIVE);
    free(h->p[i]);
    size_t n = rand_r(&seed) % 3000;
    switch (r % 4) {
      case 0: h->p[i] = malloc(n); break;
      case 1: h->p[i] = calloc(1, n); break;
      case 2: h->p[i] = realloc(malloc(8), n); break;
      default: h->p[i] = aligned_alloc(64, n); break;
    }
    h->size[i] = n;
    /* Looked up while the other threads change the registry. */
    if (h->p[i] && malloc_usable_size(h->p[i]) != n) abort();
  }
  int local;
  slots[t] = my_slot();
  stack_ok[t] = slots[t] && slots[t]->stack_lo <= (uintptr_t)&local &&
                (uintptr_t)&local < slots[t]->stack_hi;
  return NULL;
}

struct seen {
  uintptr_t *p;
  size_t *size;
  size_t n, cap;
};

static void collect(uintptr_t ptr, size_t size, void *arg) {
  struct seen *s = arg;
  if (s->n < s->cap) {
    s->p[s->n] = ptr;
    s->size[s->n] = size;
  }
  s->n++;
}

int main(void) {
  int (*iterate)(uintptr_t, size_t, void (*)(uintptr_t, size_t, void *), void *) =
      SHIM_FN(malloc_iterate);
  /* Result buffers are static: collecting must not change what is collected. */
  static uintptr_t before_p[100000], after_p[100000];
  static size_t before_s[100000], after_s[100000];
  struct seen before = {before_p, before_s, 0, 100000};
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
  /* Until now only this thread used the registry (lock-free mode); keep it
   * busy while the workers make their first calls and switch modes. */
  atomic_store(&go, 1);
  static void *mine[256];
  unsigned seed = 42;
  for (int r = 0; r < ROUNDS; r++) {
    int i = (int)(rand_r(&seed) % 256);
    free(mine[i]);
    mine[i] = malloc(rand_r(&seed) % 500);
  }
  for (int i = 0; i < 256; i++) free(mine[i]);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < THREADS; t++) {
    CHECK(slots[t] != NULL && stack_ok[t]);
    CHECK(slots[t]->state == UR_THREAD_EXITED);
  }
  CHECK(iterate(0, UINTPTR_MAX, collect, &before) == 0);
  CHECK(before.n < before.cap);

  /* Everything the program holds is registered with its size... */
  size_t ours = 0;
  struct seen check = {after_p, after_s, 0, 100000};
  CHECK(iterate(0, UINTPTR_MAX, collect, &check) == 0);
  CHECK(check.n == before.n);
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < LIVE; i++) {
      if (!held[t].p[i]) continue;
      ours++;
      int found = 0;
      for (size_t k = 0; k < check.n; k++)
        if (after_p[k] == (uintptr_t)held[t].p[i]) {
          CHECK(after_s[k] == held[t].size[i]);
          found = 1;
          break;
        }
      CHECK(found);
    }
  /* ...and once freed, exactly those entries disappear. */
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < LIVE; i++) free(held[t].p[i]);
  struct seen gone = {after_p, after_s, 0, 100000};
  CHECK(iterate(0, UINTPTR_MAX, collect, &gone) == 0);
  CHECK(gone.n == before.n - ours);

  /* A bounded range reports only pointers inside it. */
  void *a = malloc(10);
  struct seen one = {after_p, after_s, 0, 100000};
  CHECK(iterate((uintptr_t)a, 1, collect, &one) == 0);
  CHECK(one.n == 1 && after_p[0] == (uintptr_t)a && after_s[0] == 10);
  free(a);
  printf("OK %zu\n", ours);
  return 0;
}
