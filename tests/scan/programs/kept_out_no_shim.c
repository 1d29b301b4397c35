/* Run without the shim: the only pointers to two live blocks lie in memory
 * the program keeps out of forks, one in a page marked MADV_DONTFORK (a
 * snapshot child lacks it) and one in a page marked MADV_WIPEONFORK (the
 * child has it zeroed); two other blocks are dropped. A scan reads both
 * pages from the target while it is stopped for the snapshot. The leaks'
 * addresses are printed inverted (leak1, leak2), which points nowhere.
 * argv[1]: MiB more of MADV_DONTFORK memory, touched (no pointers in it);
 * argv[2] "in-heap": a live 1 MiB block, which glibc maps alone, is itself
 * kept out of forks (a child then lacks part of glibc's heap). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "scenario.h"

static void **kept(size_t size, int advice) {
  void **p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || madvise(p, size, advice) != 0) exit(1);
  return p;
}

static volatile uintptr_t leak1, leak2;
static void *volatile in_heap;

int main(int argc, char **argv) {
  void **dontfork = kept(4096, MADV_DONTFORK);
  void **wiped = kept(4096, MADV_WIPEONFORK);
  dontfork[5] = malloc(40);
  wiped[7] = malloc(72);
  size_t more = argc > 1 ? (size_t)atol(argv[1]) << 20 : 0;
  if (more) memset(kept(more, MADV_DONTFORK), 1, more);
  if (argc > 2 && strcmp(argv[2], "in-heap") == 0) {
    size_t size = 1 << 20;
    char *block = malloc(size);
    /* Its mapping: from the page holding its header to past its end. */
    uintptr_t start = (uintptr_t)block & ~(uintptr_t)4095;
    if (!block || madvise((void *)start, ((uintptr_t)block + size + 4095 - start) & ~(uintptr_t)4095,
                          MADV_DONTFORK) != 0)
      return 1;
    memset(block, 1, size);
    in_heap = block;
  }
  leak1 = ~(uintptr_t)malloc(24);
  leak2 = ~(uintptr_t)malloc(100);
  wipe();
  ready("leak_count=2 leak1=%#lx leak2=%#lx", (unsigned long)leak1, (unsigned long)leak2);
  wait_for_test();
  return 0;
}
