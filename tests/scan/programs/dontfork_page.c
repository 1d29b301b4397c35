/* The only pointer to a block lies in a page the program keeps out of
 * forks (MADV_DONTFORK, as V8 does with its heap): a snapshot child has no
 * such page, so a scan reads it from the target while it is stopped. One
 * block is dropped. argv[1]: MiB more of such memory, touched (past 16,
 * auto prefers a copy snapshot to reading it all in a fork's pause);
 * argv[2] "pointers": that memory holds, in every word, the address of the
 * block the page keeps (words a sweep must be handed), not 0x01 bytes
 * (words no block is at). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "scenario.h"

static void *dontfork(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || madvise(p, size, MADV_DONTFORK) != 0) exit(1);
  return p;
}

int main(int argc, char **argv) {
  void **page = dontfork(4096);
  page[3] = malloc(64);
  size_t more = argc > 1 ? (size_t)atol(argv[1]) << 20 : 0;
  if (more && argc > 2 && strcmp(argv[2], "pointers") == 0) {
    void **words = dontfork(more);
    for (size_t i = 0; i < more / sizeof(*words); i++) words[i] = page[3];
  } else if (more) {
    memset(dontfork(more), 1, more);
  }
  KEEP(malloc(24));
  wipe();
  ready("leak_count=1 leak_bytes=24 page=%p", (void *)page);
  wait_for_test();
  return 0;
}
