/* Page faults the parent takes per fork(): fork write-protects every page
 * the parent shares with its child, so each page the parent writes after
 * the fork costs it a fault (and a copy while the child lives).
 *
 *   fork_faults FORKS THREADS
 *
 * THREADS threads first allocate and keep blocks in many shards (so the
 * fork handlers meet shards owned by other threads), then idle. Prints
 * "faults_per_fork F": the fewest minor faults per fork of three rounds of
 * FORKS forks (the stack's pages fall differently from run to run). */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCKS 64
#define BIG (1 << 20) /* mapped alone: one block per 1 MiB, each its own shard's */

static pthread_barrier_t started;

static void *owner(void *arg) {
  (void)arg;
  void **keep = malloc(BLOCKS * sizeof *keep);
  for (int i = 0; i < BLOCKS; i++) keep[i] = malloc(BIG);
  pthread_barrier_wait(&started);
  for (;;) pause();
  return keep;
}

static long minflt(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

static double round_of(int forks) {
  long before = minflt();
  for (int i = 0; i < forks; i++) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid < 0 || waitpid(pid, NULL, 0) != pid) exit(3);
  }
  return (double)(minflt() - before) / forks;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  int forks = atoi(argv[1]), threads = atoi(argv[2]);
  mallopt(M_MMAP_THRESHOLD, BIG / 2); /* no dynamic threshold: every big block mapped */
  pthread_barrier_init(&started, NULL, (unsigned)threads + 1);
  for (int i = 0; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, owner, NULL) != 0) return 3;
  }
  pthread_barrier_wait(&started);
  round_of(10); /* the first forks' faults of every kind */
  double best = 1e9;
  for (int r = 0; r < 3; r++) {
    double f = round_of(forks);
    if (f < best) best = f;
  }
  printf("faults_per_fork %.2f\n", best);
  return 0;
}
