/* A signal handler that allocates while its thread is inside malloc or
 * free, with backtraces on: the handler's call is nested, and takes no
 * backtrace (the code it interrupted may be inside the unwinder, which is
 * not safe to enter again). A 10 kHz timer interrupts a loop of malloc and
 * free; when it lands in the shim's code inside a call, the handler
 * allocates a block, looks it up as the scanner reads the registry, and
 * frees it. Once argv[1] interruptions found a call in progress (or argv[2]
 * seconds passed), it prints "HITS n FOUND f CAPTURED c": f of the
 * handler's blocks were registered when it looked (one whose update was
 * put aside, its thread being inside the same shard, is not yet), c of
 * them with a backtrace. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

#include "shimtest.h"

static volatile long hits, found, captured;

static void on_alarm(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  if (!landed_in_a_call(context)) return;
  void *volatile p = malloc(24);
  uint32_t id = 0;
  if (registry_find(p, NULL, &id)) {
    found++;
    captured += id != 0;
  }
  free(p);
  hits++;
}

int main(int argc, char **argv) {
  long want = argc > 1 ? atol(argv[1]) : 200;
  long seconds = argc > 2 ? atol(argv[2]) : 60;
  /* Out of single-thread mode (whose thread marks no shard it is inside),
   * with a thread the timer never interrupts. */
  CHECK(start_idle_thread());
  void *volatile first = malloc(24);
  uint32_t id = 0;
  CHECK(registry_find(first, NULL, &id) && id != 0); /* the program's own calls take one */
  free(first);
  CHECK(watch_calls_every_100us(on_alarm));
  time_t end = time(NULL) + seconds;
  void *ring[16] = {0};
  for (long i = 0; hits < want && (i & 0xfff || time(NULL) < end); i++) {
    int k = (int)(i & 15);
    free(ring[k]);
    ring[k] = malloc((size_t)(i * 7) % 200 + 1);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  for (int k = 0; k < 16; k++) free(ring[k]);
  printf("HITS %ld FOUND %ld CAPTURED %ld\n", hits, found, captured);
  return 0;
}
