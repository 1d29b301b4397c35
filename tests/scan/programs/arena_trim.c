/* 4 threads each fill their own glibc arena with 8 MiB of 4 KiB blocks; on
 * the line "free" the main thread frees them all, so glibc trims the arena
 * heaps and returns the memory to the kernel, and prints FREED. With
 * "at-once" it frees them before its READY line, most likely before the
 * shim's helper has looked at the heaps. With glibc.malloc.hugetlb=1 the
 * helper must not collapse the returned ranges back (native/shim/
 * huge_arenas.c: each range once, and only what glibc uses). */
#include <pthread.h>

#include "scenario.h"

#define THREADS 4
#define PER_THREAD 2048
#define SIZE 4096

static void *keep[THREADS][PER_THREAD];

static void *fill(void *arg) {
  long t = (long)arg;
  for (int i = 0; i < PER_THREAD; i++) {
    keep[t][i] = malloc(SIZE);
    memset(keep[t][i], 0x5a, SIZE);
  }
  return NULL;
}

static void free_all(void) {
  for (int t = 0; t < THREADS; t++)
    for (int i = PER_THREAD - 1; i >= 0; i--) free(keep[t][i]);
}

int main(int argc, char **argv) {
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, fill, (void *)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  if (argc > 1 && strcmp(argv[1], "at-once") == 0) {
    free_all();
    ready("blocks=0");
    wait_for_test();
    return 0;
  }
  ready("blocks=%d", THREADS * PER_THREAD);
  char line[16];
  if (fgets(line, sizeof line, stdin) && strncmp(line, "free", 4) == 0) {
    free_all();
    dprintf(1, "FREED\n");
  }
  wait_for_test();
  return 0;
}
