/* fork() as a forking server calls it: the parent's time in fork() (until
 * it returns in the parent), the child exiting at once.
 *
 *   fork_latency FORKS BLOCKS [THREADS]
 *
 * BLOCKS live 64-byte blocks first (the heap, and under the shim its
 * registry, whose pages the kernel copies the tables of); THREADS idle
 * threads besides (a server's workers: glibc's fork then takes its
 * allocator's locks). Prints "fork_ns MEDIAN P90 MIN" over FORKS forks, then
 * "faults_per_fork F": the parent's minor page faults over them, per fork. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void *idle(void *arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  int forks = atoi(argv[1]);
  long blocks = atol(argv[2]);
  int threads = argc > 3 ? atoi(argv[3]) : 0;
  void **keep = malloc((size_t)blocks * sizeof *keep);
  for (long i = 0; i < blocks; i++) keep[i] = malloc(64);
  for (int i = 0; i < threads; i++) {
    pthread_t t;
    pthread_create(&t, NULL, idle, NULL);
  }
  uint64_t *ns = malloc((size_t)forks * sizeof *ns);
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  for (int i = 0; i < forks; i++) {
    uint64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    ns[i] = now_ns() - t0;
    waitpid(pid, NULL, 0);
  }
  getrusage(RUSAGE_SELF, &after);
  qsort(ns, (size_t)forks, sizeof *ns, cmp);
  printf("fork_ns %llu %llu %llu\n", (unsigned long long)ns[forks / 2],
         (unsigned long long)ns[forks * 9 / 10], (unsigned long long)ns[0]);
  printf("faults_per_fork %.2f\n", (double)(after.ru_minflt - before.ru_minflt) / forks);
  free(ns);
  (void)keep;
  return 0;
}
