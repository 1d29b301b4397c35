/* Blocks referenced only from static TLS of several threads, and from
 * pthread keys below and above 32 (the second level of glibc's key array is
 * itself malloc'ed). */
#include <pthread.h>

#include "scenario.h"

#define THREADS 4
#define KEYS 40

__thread void *t_block; /* external: the store must not be elided */
static pthread_key_t keys[KEYS];
static pthread_barrier_t barrier;

static void *worker(void *arg) {
  size_t id = (size_t)arg;
  t_block = malloc(1000 + id);
  for (int k = 0; k < KEYS; k++) pthread_setspecific(keys[k], malloc(8));
  wipe();
  pthread_barrier_wait(&barrier);
  for (;;) pause();
  return NULL;
}

__attribute__((noinline)) static void drop(void) { KEEP(malloc(77)); }

int main(void) {
  pthread_t t[THREADS];
  for (int k = 0; k < KEYS; k++) pthread_key_create(&keys[k], NULL);
  pthread_barrier_init(&barrier, NULL, THREADS + 1);
  for (size_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  pthread_barrier_wait(&barrier);
  t_block = malloc(999);
  drop();
  wipe();
  ready("leak_count=1 leak_bytes=77");
  wait_for_test();
  return 0;
}
