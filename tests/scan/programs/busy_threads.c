/* BUSY threads that never sleep (a service's busy workers), beside a heap
 * of LIVE reachable blocks and LEAKED dropped ones.
 *   busy_threads BUSY [LIVE LEAKED] */
#include <pthread.h>

#include "scenario.h"

static void *spin(void *arg) {
  volatile unsigned long *n = arg;
  for (;;) (*n)++;
  return NULL;
}

int main(int argc, char **argv) {
  long busy = argc > 1 ? atol(argv[1]) : 1;
  long live = argc > 2 ? atol(argv[2]) : 20000;
  long leaked = argc > 3 ? atol(argv[3]) : 5000;
  void **keep = malloc(sizeof(void *) * (size_t)live);
  long bytes = 0;
  for (long i = 0; i < live; i++) keep[i] = malloc(16 + (size_t)(i % 64));
  for (long j = 0; j < leaked; j++) {
    size_t n = 8 + (size_t)(j % 32);
    KEEP(malloc(n));
    bytes += (long)n;
  }
  static unsigned long counters[64];
  for (long t = 0; t < busy && t < 64; t++) {
    pthread_t th;
    if (pthread_create(&th, NULL, spin, &counters[t]) != 0) return 3;
  }
  wipe();
  ready("leak_count=%ld leak_bytes=%ld", leaked, bytes);
  wait_for_test();
  KEEP(keep);
  return 0;
}
