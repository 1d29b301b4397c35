/* A heap of 1 KiB blocks (argv[1] of them), every page of it written, then
 * a child forked that only waits, unless argv[2] is 0: the heap's pages are
 * shared copy-on-write between the two. Reading such a page with a pin that unshares it (process_vm_readv)
 * would copy it into this process; the child's Shared_Dirty shows whether
 * its pages are still shared. Five blocks are leaked. */
#include <stdint.h>
#include <sys/types.h>

#include "../../scan/programs/scenario.h"

#define WORDS (1024 / 8)

int main(int argc, char **argv) {
  size_t nblocks = argc > 1 ? (size_t)atol(argv[1]) : 20000;
  uint64_t **blocks = malloc(nblocks * sizeof(*blocks));
  for (size_t i = 0; i < nblocks; i++) {
    blocks[i] = malloc(WORDS * 8);
    for (size_t w = 0; w < WORDS; w++) blocks[i][w] = (i << 20) ^ (w << 8) ^ 1;
  }
  drop_five_leaks();
  wipe();
  int gate[2];
  if (pipe(gate) != 0) return 1;
  pid_t child = argc > 2 && atoi(argv[2]) == 0 ? -1 : fork();
  if (child == 0) {
    /* Until the parent is gone (its end of the pipe closes). */
    char c;
    close(gate[1]);
    while (read(gate[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  close(gate[0]);
  ready(FIVE_LEAKS " child=%d", (int)child);
  wait_for_test();
  KEEP(blocks);
  return 0;
}
