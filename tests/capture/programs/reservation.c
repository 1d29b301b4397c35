/* A runtime's reservation of address space, never touched and never
 * accessible (PROT_NONE), as large as this machine allows: MariaDB keeps
 * 8 TiB so beside its buffer pool, V8 and Go runtimes and wasm engines
 * keep tens of GiB. Nothing tracks writes there, and taking a tracking
 * down must not walk it (in 8 MiB pieces, it kept the shim's helper busy
 * for seconds). One block leaked. */
#include <sys/mman.h>

#include "../../scan/programs/scenario.h"

int main(void) {
  size_t n = (size_t)120 << 40;
  void *p = MAP_FAILED;
  for (; n >= ((size_t)1 << 30); n /= 2) {
    p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) break;
  }
  if (p == MAP_FAILED) return 1;
  KEEP(malloc(48)); /* dropped */
  wipe();
  ready("leak_count=1 leak_bytes=48 reserved=%lu reservation=%lu", (unsigned long)n,
        (unsigned long)(uintptr_t)p);
  wait_for_test();
  return 0;
}
