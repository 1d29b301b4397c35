/* 24 MiB of 4 KiB blocks from the main thread's brk heap, every eighth one
 * dropped: big enough for glibc to put it on transparent huge pages when run
 * with glibc.malloc.hugetlb=1. */
#include "scenario.h"

#define BLOCKS 6144
#define SIZE 4096

static void *keep[BLOCKS];

int main(void) {
  long leaked = 0, bytes = 0;
  for (int i = 0; i < BLOCKS; i++) {
    char *p = malloc(SIZE);
    memset(p, 0x5a, SIZE); /* touch it: the kernel backs it now */
    if (i % 8 == 7) {
      KEEP(p);
      leaked++;
      bytes += SIZE;
    } else {
      keep[i] = p;
    }
  }
  wipe();
  ready("leak_count=%ld leak_bytes=%ld", leaked, bytes);
  wait_for_test();
  KEEP(keep);
  return 0;
}
