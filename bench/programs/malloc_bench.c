/* malloc/free throughput on a mixed-size workload.
 * usage: malloc_bench THREADS OPS_PER_THREAD
 * Each thread keeps a window of live blocks and replaces a random one per
 * step: mostly small sizes, some medium, a few large, like real programs. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 4096

static long ops_per_thread;

static inline uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t pick_size(uint64_t r) {
  unsigned bucket = (unsigned)(r % 100);
  if (bucket < 70) return 16 + (r >> 8) % 240;   /* small */
  if (bucket < 95) return 256 + (r >> 8) % 3840; /* medium */
  return 4096 + (r >> 8) % 61440;                /* large, below the mmap threshold */
}

static void *worker(void *arg) {
  uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uintptr_t)arg;
  void **live = calloc(WINDOW, sizeof *live);
  for (long i = 0; i < ops_per_thread; i++) {
    uint64_t r = next(&seed);
    size_t slot = r % WINDOW;
    if (live[slot]) {
      free(live[slot]);
      live[slot] = NULL;
    } else {
      char *p = malloc(pick_size(r >> 12));
      p[0] = (char)i; /* touch it, as a program would */
      live[slot] = p;
    }
  }
  for (size_t i = 0; i < WINDOW; i++) free(live[i]);
  free(live);
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  ops_per_thread = argc > 2 ? atol(argv[2]) : 5000000;
  pthread_t th[64];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (threads == 1) {
    worker(NULL); /* a single-threaded program: no second thread at all */
  } else {
    for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("%.0f\n", (double)threads * (double)ops_per_thread / secs);
  return 0;
}
