/* Threads allocate and free without pause while scans run. Exactly the
 * dropped blocks must be reported: a thread paused inside malloc, free or
 * realloc must never make a block look leaked. */
#include <pthread.h>

#include "scenario.h"

#define THREADS 4
#define SLOTS 256

static void *slots[THREADS][SLOTS];

static void *churn(void *arg) {
  size_t id = (size_t)arg;
  unsigned x = (unsigned)id * 2654435761u + 1;
  for (;;) {
    x = x * 1103515245u + 12345u;
    unsigned i = (x >> 8) % SLOTS;
    switch ((x >> 20) % 3) {
      case 0:
        free(slots[id][i]);
        slots[id][i] = malloc(1 + (x >> 24) % 512);
        break;
      case 1:
        slots[id][i] = realloc(slots[id][i], 1 + (x >> 22) % 2048);
        break;
      default: {
        /* a short-lived linked pair: the second is reachable only via the first */
        void **a = malloc(32);
        a[0] = malloc(48);
        free(a[0]);
        free(a);
      }
    }
  }
  return NULL;
}

int main(void) {
  drop_five_leaks();
  wipe();
  pthread_t t[THREADS];
  for (size_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, churn, (void *)i);
  ready(FIVE_LEAKS);
  wait_for_test();
  return 0;
}
