/* A 10 kHz timer whose handler frees blocks the main thread allocated,
 * while the main thread allocates with backtraces on: many handler calls
 * land while the shim unwinds (its own work). Every block the handler freed
 * must have left the registry, as it left glibc. */
#include <signal.h>
#include <sys/time.h>

#include "shimtest.h"

#define POOL 64
#define LOG 4096
static void *volatile pool[POOL];
static uintptr_t freed[LOG];
static volatile int nfreed;

static void on_alarm(int sig) {
  (void)sig;
  for (int k = 0; k < POOL && nfreed < LOG; k++) {
    void *p = __atomic_exchange_n(&pool[k], NULL, __ATOMIC_SEQ_CST);
    if (!p) continue;
    freed[nfreed++] = (uintptr_t)p;
    free(p);
    break;
  }
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 300000;
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 100}, {0, 100}};
  setitimer(ITIMER_REAL, &it, NULL);
  for (long i = 0; i < iters && nfreed < LOG; i++) {
    int k = (int)(i % POOL);
    void *volatile q = malloc((size_t)(i * 13) % 300 + 1); /* keep the thread in the allocator */
    free(q);
    if (!pool[k]) {
      void *p = malloc((size_t)(i * 7) % 500 + 1);
      CHECK(p);
      __atomic_store_n(&pool[k], p, __ATOMIC_SEQ_CST);
    }
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  for (int k = 0; k < POOL; k++) free(pool[k]);
  /* Nothing the loop allocated is live now: a registered address is stale. */
  int stale = 0;
  for (int i = 0; i < nfreed; i++) stale += registry_find((void *)freed[i], NULL, NULL);
  if (stale) {
    printf("%d of %d blocks freed in the handler are still registered\n", stale, nfreed);
    return 1;
  }
  printf("OK\n");
  return 0;
}
