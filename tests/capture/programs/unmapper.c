/* A thread keeps replacing big blocks (glibc maps each one, and unmaps it
 * as it is freed); each holds the only pointer to a small block, which the
 * new big block takes over. A snapshot that lost a freed big block's bytes
 * would see its small block unreachable: a leak invented. Five blocks are
 * leaked. */
#include <malloc.h>
#include <pthread.h>
#include <string.h>

#include "../../scan/programs/scenario.h"

#define RING 64
#define BIG (256 * 1024)

static void **ring[RING];

static void *replace(void *arg) {
  (void)arg;
  for (unsigned i = 0;; i = (i + 1) % RING) {
    void **fresh = malloc(BIG);
    memset(fresh, 0, BIG);
    fresh[0] = ring[i][0];
    void **old = ring[i];
    ring[i] = fresh;
    free(old);
  }
  return NULL;
}

int main(void) {
  /* A fixed threshold: glibc's own rises past BIG at the first free of a
   * mapped block, and the blocks after it came from an arena, unmapped
   * only now and then. */
  mallopt(M_MMAP_THRESHOLD, BIG / 2);
  for (int i = 0; i < RING; i++) {
    ring[i] = calloc(1, BIG);
    ring[i][0] = malloc(64);
  }
  drop_five_leaks();
  wipe();
  pthread_t t;
  pthread_create(&t, NULL, replace, NULL);
  ready(FIVE_LEAKS);
  wait_for_test();
  return 0;
}
