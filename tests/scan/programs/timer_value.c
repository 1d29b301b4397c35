/* The only pointer to a block is the value of a POSIX timer that notifies
 * by signal (sigev_value, handed back in the signal's siginfo): the kernel
 * holds it. One block is dropped. */
#include <signal.h>
#include <time.h>

#include "scenario.h"

static timer_t timer;

static void arm(void) {
  struct sigevent sev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGRTMIN};
  sev.sigev_value.sival_ptr = malloc(56);
  if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) exit(1);
  memset(&sev, 0, sizeof sev);
  KEEP(&sev);
}

int main(void) {
  arm();
  KEEP(malloc(24));
  wipe();
  ready("leak_count=1 leak_bytes=24");
  wait_for_test();
  return 0;
}
