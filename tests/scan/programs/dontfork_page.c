/* The only pointer to a block lies in a page the program keeps out of
 * forks (MADV_DONTFORK, as V8 does with its heap): a snapshot child has no
 * such page, so a scan must not sweep one. One block is dropped. */
#include <sys/mman.h>

#include "scenario.h"

int main(void) {
  void **page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED || madvise(page, 4096, MADV_DONTFORK) != 0) return 1;
  page[3] = malloc(64);
  KEEP(malloc(24));
  wipe();
  ready("leak_count=1 leak_bytes=24 page=%p", (void *)page);
  wait_for_test();
  return 0;
}
