/* A block referenced only from the TLS of a thread that has exited: glibc
 * keeps the dead thread's stack (and its TLS) in its cache, but nothing can
 * reach the block any more, so it is a leak. */
#include <pthread.h>

#include "scenario.h"

__thread void *t_block; /* external: the store must not be elided */

static void *worker(void *arg) {
  (void)arg;
  t_block = malloc(4321);
  wipe();
  return NULL;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  pthread_join(t, NULL);
  wipe();
  ready("leak_count=1 leak_bytes=4321");
  wait_for_test();
  return 0;
}
