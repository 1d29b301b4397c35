/* Two threads that exit around one that lives on: each exited thread's TLS
 * held the only pointer to its block, so both blocks leak; the live one's
 * stack keeps its own. From glibc 2.42 a stack's guard page is a guard
 * region inside its mapping (MADV_GUARD_INSTALL), so the three stacks, made
 * one after the other, are one mapping: the live stack sits between the two
 * exited threads' cached stacks, which glibc keeps with their TLS and DTV. */
#include <pthread.h>

#include "scenario.h"

__thread void *t_block; /* external: the store must not be elided */

static pthread_barrier_t all_made, go;

static void *exiting(void *arg) {
  t_block = malloc((size_t)(long)arg);
  wipe();
  pthread_barrier_wait(&all_made);
  pthread_barrier_wait(&go);
  return NULL;
}

static void *living(void *arg) {
  (void)arg;
  void *volatile kept = malloc(4000);
  t_block = malloc(3000);
  wipe();
  pthread_barrier_wait(&all_made);
  for (;;) pause();
  KEEP(kept);
  return NULL;
}

int main(void) {
  pthread_t first, live, last;
  pthread_barrier_init(&all_made, NULL, 4);
  pthread_barrier_init(&go, NULL, 3);
  /* All three alive at once, so none takes over another's cached stack. */
  pthread_create(&first, NULL, exiting, (void *)1111L);
  pthread_create(&live, NULL, living, NULL);
  pthread_create(&last, NULL, exiting, (void *)2222L);
  pthread_barrier_wait(&all_made);
  pthread_barrier_wait(&go);
  pthread_join(first, NULL);
  pthread_join(last, NULL);
  wipe();
  ready("leak_count=2 leak_bytes=3333");
  wait_for_test();
  return 0;
}
