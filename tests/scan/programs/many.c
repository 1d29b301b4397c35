/* LIVE blocks reachable from a global array and LEAKED dropped blocks,
 * interleaved so both share the same heap pages. */
#include "scenario.h"

int main(int argc, char **argv) {
  long live = argc > 1 ? atol(argv[1]) : 200000;
  long leaked = argc > 2 ? atol(argv[2]) : 100000;
  void **keep = malloc(sizeof(void *) * (size_t)live);
  long bytes = 0;
  for (long i = 0, j = 0; i < live || j < leaked;) {
    if (i < live) {
      keep[i] = malloc(16 + (size_t)(i % 64));
      i++;
    }
    if (j < leaked) {
      size_t n = 8 + (size_t)(j % 32);
      KEEP(malloc(n));
      bytes += (long)n;
      j++;
    }
  }
  wipe();
  ready("leak_count=%ld leak_bytes=%ld", leaked, bytes);
  wait_for_test();
  KEEP(keep);
  return 0;
}
