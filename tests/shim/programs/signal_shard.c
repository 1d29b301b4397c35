/* A signal handler that allocates while its thread is inside a registry
 * shard: with backtraces on every block is in a shard, and once a second
 * thread exists the main thread owns its shards and updates them without
 * the lock. A 10 kHz timer interrupts a loop of malloc and free; when it
 * lands in the shim's code inside a call, the handler frees four of the
 * blocks it keeps and allocates others. Once argv[1] interruptions found
 * a call in progress (or argv[2] seconds passed), every block the program
 * holds is looked up as the scanner reads the registry, and it prints
 * "HITS n MISSING m": m blocks live but not registered, which a scan would
 * neither read nor report (and blocks only they point to would be reported
 * as leaks). */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

#include "shimtest.h"

#define KEPT 16
#define RING 16

static volatile long hits;
static void *kept[KEPT];

static void on_alarm(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  if (!landed_in_a_call(context)) return;
  for (int i = 0; i < 4; i++) {
    int k = (int)((hits * 4 + i) % KEPT);
    free(kept[k]);
    kept[k] = malloc((size_t)(k % 7) * 16 + 24);
  }
  hits++;
}

int main(int argc, char **argv) {
  long want = argc > 1 ? atol(argv[1]) : 200;
  long seconds = argc > 2 ? atol(argv[2]) : 60;
  /* Out of single-thread mode, with a thread the timer never interrupts
   * (the handler is the main thread's alone). */
  CHECK(start_idle_thread());
  free(malloc(1));
  CHECK(watch_calls_every_100us(on_alarm));
  time_t end = time(NULL) + seconds;
  void *ring[RING] = {0};
  for (long i = 0; hits < want && (i & 0xffff || time(NULL) < end); i++) {
    int k = (int)(i & (RING - 1));
    free(ring[k]);
    ring[k] = malloc((size_t)(i * 7) % 200 + 1);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  long missing = 0;
  for (int k = 0; k < RING; k++) missing += ring[k] && !registry_find(ring[k], NULL, NULL);
  for (int k = 0; k < KEPT; k++) missing += kept[k] && !registry_find(kept[k], NULL, NULL);
  printf("HITS %ld MISSING %ld\n", hits, missing);
  return 0;
}
