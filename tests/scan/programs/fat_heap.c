/* MIB mebibytes (argv[1], default 200) of 64 KiB blocks from the brk heap,
 * every page touched, every eighth block dropped: more memory than a scanner
 * under a tight memory limit may copy. */
#include "scenario.h"

#define SIZE (64 * 1024)

int main(int argc, char **argv) {
  long blocks = (argc > 1 ? atol(argv[1]) : 200) * 16;
  void **keep = malloc(sizeof(void *) * (size_t)blocks);
  long leaked = 0, bytes = 0;
  for (long i = 0; i < blocks; i++) {
    char *p = malloc(SIZE);
    memset(p, 0x5a, SIZE);
    if (i % 8 == 3) {
      KEEP(p);
      keep[i] = NULL;
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
