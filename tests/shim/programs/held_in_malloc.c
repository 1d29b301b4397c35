/* The program's one thread held inside an allocator call, as a debugger's
 * stop, a page fault that waits (a userfaultfd's), or a signal handler that
 * blocks would hold it: a SIGALRM handler that lands while the thread's
 * slot shows a call waits there on stdin for ever. Prints "READY" once
 * held. Anything that waits for the calls in progress to end (the helper's
 * request work, malloc_disable) then waits as long as the thread is held. */
#include <unistd.h>

#include "shimtest.h"

static struct ur_thread_slot *volatile slot; /* read by the handler */

static void on_alarm(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)si;
  (void)uc;
  if (__atomic_load_n(&slot->op, __ATOMIC_ACQUIRE) == UR_OP_NONE) return;
  stop_timer();
  static const char ready[] = "READY\n";
  if (write(1, ready, sizeof ready - 1) < 0) _exit(3);
  char c;
  for (;;)
    if (read(0, &c, 1) <= 0) pause();
}

int main(void) {
  free(malloc(64)); /* the slot is made by the first call */
  slot = my_slot();
  if (!slot) return 2;
  every_100us(on_alarm);
  for (;;) {
    void *volatile p = malloc(64);
    free(p);
  }
}
