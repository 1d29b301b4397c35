/* The only pointer to a block lies in a page the program has the kernel
 * wipe in its forks (MADV_WIPEONFORK, as LibreSSL's and BoringSSL's random
 * number generators do with their state): a snapshot child has the page,
 * zeroed, so a scan reads it from the target while it is stopped. One
 * block is dropped. */
#include <stdlib.h>
#include <sys/mman.h>

#include "scenario.h"

int main(void) {
  void **page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED || madvise(page, 4096, MADV_WIPEONFORK) != 0) return 1;
  page[5] = malloc(48);
  KEEP(malloc(24));
  wipe();
  ready("leak_count=1 leak_bytes=24 page=%p", (void *)page);
  wait_for_test();
  return 0;
}
