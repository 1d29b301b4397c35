/* The only pointers to two blocks are the alternate signal stacks that two
 * threads set with sigaltstack(): the kernel holds them. A third stack was
 * set, then disabled and dropped without being freed: a leak, as is one
 * plain block. */
#include <pthread.h>
#include <signal.h>

#include "scenario.h"

static pthread_barrier_t set;

static void use_stack(size_t size) {
  stack_t ss = {.ss_sp = malloc(size), .ss_size = size};
  if (sigaltstack(&ss, NULL) != 0) exit(1);
  memset(&ss, 0, sizeof ss);
  KEEP(&ss);
}

static void *thread_main(void *arg) {
  (void)arg;
  use_stack(SIGSTKSZ + 64);
  wipe();
  pthread_barrier_wait(&set);
  for (;;) pause();
  return NULL;
}

int main(void) {
  pthread_barrier_init(&set, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, thread_main, NULL);
  pthread_barrier_wait(&set);
  use_stack(SIGSTKSZ + 128); /* dropped: disabled below */
  stack_t off = {.ss_flags = SS_DISABLE};
  if (sigaltstack(&off, NULL) != 0) return 1;
  use_stack(SIGSTKSZ);
  KEEP(malloc(24));
  wipe();
  ready("leak_count=2 leak_bytes=%d", (int)(SIGSTKSZ + 128 + 24));
  wait_for_test();
  return 0;
}
