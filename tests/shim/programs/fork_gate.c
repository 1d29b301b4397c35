/* Several threads fork at once while others take allocation backtraces
 * without pause. A forker closes the shim's unwind gate for itself in its
 * prepare handler and opens it in its parent handler, after giving back its
 * locks; by then the next forker may have closed the gate for itself, and
 * opening that one let unwinding threads in that no longer woke it as they
 * left: it waited forever. Prints "OK" when every forker finished within a
 * minute, "HUNG" when one did not. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "shimtest.h"

#define FORKERS 4
#define UNWINDERS 4
#define FORKS 400

static atomic_int done;

static __attribute__((noinline)) void *deep(int depth, size_t n) {
  if (depth > 0) {
    void *p = deep(depth - 1, n);
    __asm__ volatile("" ::: "memory");
    return p;
  }
  return malloc(n);
}

static void *unwinder(void *arg) {
  size_t n = (size_t)(uintptr_t)arg;
  while (!atomic_load(&done)) {
    free(deep(12, n));
    n = n % 2000 + 8;
  }
  return NULL;
}

static void *forker(void *arg) {
  (void)arg;
  for (int i = 0; i < FORKS; i++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(0);
    CHECK(waitpid(pid, NULL, 0) == pid);
  }
  return NULL;
}

int main(void) {
  pthread_t u[UNWINDERS], f[FORKERS];
  for (int t = 0; t < UNWINDERS; t++)
    CHECK(pthread_create(&u[t], NULL, unwinder, (void *)(uintptr_t)(t * 100 + 8)) == 0);
  for (int t = 0; t < FORKERS; t++) CHECK(pthread_create(&f[t], NULL, forker, NULL) == 0);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 60;
  for (int t = 0; t < FORKERS; t++) {
    if (pthread_timedjoin_np(f[t], NULL, &until) != 0) {
      /* Not puts: the stuck forker holds stdio's list lock. */
      CHECK(write(1, "HUNG\n", 5) == 5);
      _exit(0);
    }
  }
  atomic_store(&done, 1);
  for (int t = 0; t < UNWINDERS; t++) pthread_join(u[t], NULL);
  puts("OK");
  return 0;
}
