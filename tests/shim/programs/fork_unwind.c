/* Threads that take allocation backtraces without pause while another thread
 * forks: each child takes a backtrace of its own (malloc under backtrace=N,
 * free under free_track=N) and exits. libunwind keeps process-wide locks,
 * which a fork copies held if another thread was inside libunwind at that
 * moment; the child's first unwind then waits forever. Prints "OK" when every
 * child exited in time, "HUNG" (and kills it) when one did not. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "shimtest.h"

#define THREADS 3
#define FORKS 300

static atomic_int done;

/* Deep enough that each backtrace spends a while inside the unwinder. */
static __attribute__((noinline)) void *churn(int depth, size_t n) {
  if (depth > 0) {
    void *p = churn(depth - 1, n);
    __asm__ volatile("" ::: "memory");
    return p;
  }
  return malloc(n);
}

/* A new thread's unwinds miss libunwind's per-thread caches and take its
 * slow path, where its process-wide locks are. */
static void *short_lived(void *arg) {
  size_t n = (size_t)(uintptr_t)arg;
  for (int i = 0; i < 4; i++) free(churn(24, n + (size_t)i * 40));
  return NULL;
}

static void *worker(void *arg) {
  (void)arg;
  size_t n = 16;
  while (!atomic_load(&done)) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, short_lived, (void *)(uintptr_t)n) == 0);
    pthread_join(t, NULL);
    n = n % 4000 + 24;
  }
  return NULL;
}

/* 1 if the child exited 0 within ten seconds. */
static int reaped(pid_t pid) {
  struct timespec nap = {0, 1000000};
  for (int i = 0; i < 10000; i++) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    CHECK(r >= 0);
    if (r == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    nanosleep(&nap, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return 0;
}

int main(void) {
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) CHECK(pthread_create(&th[t], NULL, worker, NULL) == 0);
  int hung = 0;
  for (int f = 0; f < FORKS && !hung; f++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      free(churn(4, 100));
      _exit(0);
    }
    hung = !reaped(pid);
  }
  atomic_store(&done, 1);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  puts(hung ? "HUNG" : "OK");
  return 0;
}
