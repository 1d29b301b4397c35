/* HEAP_MIB of heap in blocks of SIZE bytes, allocated by THREADS threads
 * (each its own share, so each mostly on its own glibc arena), for weighing
 * the shim's own memory against the heap it registers.
 * usage: memory_shape THREADS SIZE HEAP_MIB
 * Prints START and waits for a line; allocates, prints READY n=N and waits
 * for stdin to close. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  int threads = atoi(argv[1]);
  size = (size_t)atol(argv[2]);
  size_t heap = (size_t)atol(argv[3]) << 20;
  if (threads < 1 || threads > 64 || size == 0) return 2;
  per_thread = heap / size / (size_t)threads;
  blocks = calloc((size_t)threads * per_thread, sizeof *blocks);
  if (!blocks) return 1;
  char line[64];
  setvbuf(stdout, NULL, _IONBF, 0);
  printf("START\n");
  if (!fgets(line, sizeof line, stdin)) return 0;
  pthread_t th[64];
  for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, fill, (void *)(uintptr_t)t);
  for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
  printf("READY n=%zu\n", (size_t)threads * per_thread);
  while (fgets(line, sizeof line, stdin)) {
  }
  return 0;
}
