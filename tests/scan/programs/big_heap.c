/* MIB mebibytes (argv[1], default 24) of SIZE-byte blocks (argv[2], default
 * 4 KiB) from the main thread's brk heap, every page touched, every eighth
 * block dropped. 24 MiB of 4 KiB blocks is big enough for glibc to put the
 * heap on transparent huge pages when run with glibc.malloc.hugetlb=1;
 * 200 MiB of 64 KiB blocks is more than a scanner under a tight memory limit
 * may copy. */
#include "scenario.h"

int main(int argc, char **argv) {
  long mib = argc > 1 ? atol(argv[1]) : 24;
  long size = argc > 2 ? atol(argv[2]) : 4096;
  long blocks = (mib << 20) / size;
  void **keep = malloc(sizeof(void *) * (size_t)blocks);
  long leaked = 0, bytes = 0;
  for (long i = 0; i < blocks; i++) {
    char *p = malloc((size_t)size);
    memset(p, 0x5a, (size_t)size); /* touch it: the kernel backs it now */
    if (i % 8 == 3) {             /* never the last block: no stale copy of it */
      KEEP(p);
      keep[i] = NULL;
      leaked++;
      bytes += size;
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
