/* 4 threads each fill their own glibc arena with 8 MiB of 4 KiB blocks,
 * every eighth one dropped, then wait: with glibc.malloc.hugetlb=1 the shim's
 * helper collapses the arenas' whole 2 MiB ranges onto huge pages
 * (native/shim/huge_arenas.c). The blocks stay referenced from a global. */
#include <pthread.h>

#include "scenario.h"

#define THREADS 4
#define PER_THREAD 2048
#define SIZE 4096

static void *keep[THREADS][PER_THREAD];
static long leaked[THREADS];

static void *fill(void *arg) {
  long t = (long)arg;
  for (int i = 0; i < PER_THREAD; i++) {
    char *p = malloc(SIZE);
    memset(p, 0x5a, SIZE);
    if (i % 8 == 7) {
      KEEP(p);
      leaked[t]++;
    } else {
      keep[t][i] = p;
    }
  }
  return NULL;
}

int main(void) {
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, fill, (void *)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  long count = 0;
  for (int t = 0; t < THREADS; t++) count += leaked[t];
  wipe();
  ready("leak_count=%ld leak_bytes=%ld", count, count * SIZE);
  wait_for_test();
  KEEP(keep);
  return 0;
}
