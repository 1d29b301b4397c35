/* malloc and free inside a 10 kHz SIGALRM handler of a single-threaded
 * program (async-signal-unsafe, but common and harmless with glibc, which
 * takes no lock while the process has one thread). argv[1]: iterations.
 * argv[2] "stats": no timer; instead ask the shim's helper for glibc's
 * allocator statistics (SIGRTMAX-15) now and then while allocating. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static volatile long nsig;

static void on_alarm(int sig) {
  (void)sig;
  void *p = malloc(48);
  if (p) memset(p, 1, 48);
  free(p);
  nsig++;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000000;
  int stats = argc > 2 && strcmp(argv[2], "stats") == 0;
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 100}, {0, 100}};
  if (!stats) setitimer(ITIMER_REAL, &it, NULL);
  void *ring[128] = {0};
  for (long i = 0; i < iters; i++) {
    int k = (int)(i & 127);
    free(ring[k]);
    ring[k] = malloc((size_t)(i * 7) % 2000 + 1);
    if (stats && i % 200000 == 0) raise(SIGRTMAX - 15);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  for (int k = 0; k < 128; k++) free(ring[k]);
  printf("OK\n");
  return 0;
}
