/* A pipe holds two unread words: the only pointer to a heap block, and a
 * pointer into an anonymous page that holds no block. Every snapshot mode
 * reads the same words of it as roots: the block is no leak, and the pipe's
 * count in the report's roots is the same in every mode. */
#include <sys/mman.h>

#include "../../scan/programs/scenario.h"

int main(void) {
  int fds[2];
  if (pipe(fds) != 0) return 2;
  void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return 2;
  /* Read-only: a mapping of its own, not merged into a neighbour that may
   * hold blocks. */
  if (mprotect(page, 4096, PROT_READ) != 0) return 2;
  void *words[2] = {malloc(48), page};
  if (write(fds[1], words, sizeof words) != (ssize_t)sizeof words) return 3;
  words[0] = NULL;
  KEEP(words);
  wipe();
  ready("leak_count=0 leak_bytes=0");
  wait_for_test();
  return 0;
}
