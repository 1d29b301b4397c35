/* The only pointers to two blocks are the values of signals queued and not
 * yet delivered (sigqueue to the process, pthread_sigqueue to a thread),
 * blocked until the program gets round to them with sigwaitinfo: the kernel
 * holds them. One block is dropped. */
#include <pthread.h>
#include <signal.h>

#include "scenario.h"

__attribute__((noinline)) static void queue(void) {
  union sigval v = {.sival_ptr = malloc(40)};
  if (sigqueue(getpid(), SIGRTMIN + 1, v) != 0) exit(1);
  v.sival_ptr = malloc(72);
  if (pthread_sigqueue(pthread_self(), SIGRTMIN + 2, v) != 0) exit(1);
  v.sival_ptr = NULL;
  KEEP(&v);
}

int main(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGRTMIN + 1);
  sigaddset(&set, SIGRTMIN + 2);
  sigprocmask(SIG_BLOCK, &set, NULL);
  queue();
  KEEP(malloc(24));
  wipe();
  ready("leak_count=1 leak_bytes=24");
  wait_for_test();
  return 0;
}
