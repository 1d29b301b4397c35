/* A server's shared memory (an opcache, a buffer pool shared with its
 * workers): 64 MiB of MAP_SHARED anonymous memory, every page present,
 * holding the only pointer to one block. One block leaked beside it. */
#include <sys/mman.h>

#include "../../scan/programs/scenario.h"

#define SHARED_BYTES ((size_t)64 << 20)

__attribute__((noinline)) static void setup(void) {
  void **shared = mmap(NULL, SHARED_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                       -1, 0);
  if (shared == MAP_FAILED) exit(3);
  memset(shared, 0x5a, SHARED_BYTES);
  shared[SHARED_BYTES / sizeof(void *) / 2] = malloc(200); /* kept by the shared page only */
  KEEP(malloc(300));
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=300 shared_bytes=%zu", SHARED_BYTES);
  wait_for_test();
  return 0;
}
