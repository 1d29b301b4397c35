/* A heap of HEAP_MIB of blocks of SIZE bytes, allocated by THREADS threads
 * (each its own share, so each mostly on its own glibc arena), for
 * bench/shim_memory_bench.py to weigh the shim's own memory against.
 * usage: memory_shape THREADS SIZE HEAP_MIB
 * Prints START and waits for a line; allocates, prints READY n=... and
 * waits for a line; frees everything, calls malloc_trim(0), prints FREED
 * and waits for stdin to close. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t size, per_thread;
static void **blocks;

static void *fill(void *arg) {
  void **mine = blocks + (size_t)(uintptr_t)arg * per_thread;
  for (size_t i = 0; i < per_thread; i++) {
    char *p = malloc(size);
    if (!p) abort();
    p[0] = 1;
    mine[i] = p;
  }
  return NULL;
}

static void *drain(void *arg) {
  void **mine = blocks + (size_t)(uintptr_t)arg * per_thread;
  for (size_t i = 0; i < per_thread; i++) free(mine[i]);
  return NULL;
}

static void run(int threads, void *(*fn)(void *)) {
  pthread_t th[64];
  for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, fn, (void *)(uintptr_t)t);
  for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
}

static void wait_line(void) {
  char line[64];
  if (!fgets(line, sizeof line, stdin)) exit(0);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  size = argc > 2 ? (size_t)atol(argv[2]) : 64;
  size_t heap = (argc > 3 ? (size_t)atol(argv[3]) : 64) << 20;
  if (threads < 1 || threads > 64 || size == 0) return 2;
  per_thread = heap / size / (size_t)threads;
  /* Allocated before START: part of the baseline, not of what is weighed. */
  blocks = calloc(per_thread * (size_t)threads, sizeof *blocks);
  if (!blocks) return 2;
  printf("START\n");
  fflush(stdout);
  wait_line();
  run(threads, fill);
  printf("READY n=%zu bytes=%zu\n", per_thread * (size_t)threads, per_thread * (size_t)threads * size);
  fflush(stdout);
  wait_line();
  run(threads, drain);
  malloc_trim(0);
  printf("FREED\n");
  fflush(stdout);
  wait_line();
  return 0;
}
