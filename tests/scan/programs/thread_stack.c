/* The only pointer to a block is on another thread's stack. */
#include <pthread.h>

#include "scenario.h"

static pthread_barrier_t barrier;

static void *worker(void *arg) {
  (void)arg;
  void *volatile kept = malloc(4000);
  wipe();
  pthread_barrier_wait(&barrier);
  for (;;) pause();
  KEEP(kept);
  return NULL;
}

__attribute__((noinline)) static void drop(void) { KEEP(malloc(17)); }

int main(void) {
  pthread_t t;
  pthread_barrier_init(&barrier, NULL, 2);
  pthread_create(&t, NULL, worker, NULL);
  pthread_barrier_wait(&barrier);
  drop();
  wipe();
  ready("leak_count=1 leak_bytes=17");
  wait_for_test();
  return 0;
}
