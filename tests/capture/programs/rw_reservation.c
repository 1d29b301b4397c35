/* A reservation of address space that is readable and writable but never
 * touched (MAP_NORESERVE), as large as this machine allows up to argv[1]
 * GiB (default 8 TiB): a write tracking registers it, and the helper's own
 * teardown unregisters it in one call where it can read its pagemap. With
 * argv[2], the program first chroots into that directory (an empty one
 * has no /proc): the teardown then goes in 8 MiB pieces (8 TiB: 2.5 s of
 * the helper's time). One block leaked. */
#include <sys/mman.h>
#include <unistd.h>

#include "../../scan/programs/scenario.h"

int main(int argc, char **argv) {
  size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 8192) << 30;
  if (argc > 2 && (chroot(argv[2]) != 0 || chdir("/") != 0)) return 2;
  void *p = MAP_FAILED;
  for (; n >= ((size_t)1 << 30); n /= 2) {
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) break;
  }
  if (p == MAP_FAILED) return 1;
  KEEP(malloc(48)); /* dropped */
  wipe();
  ready("leak_count=1 leak_bytes=48 reserved=%zu", n);
  wait_for_test();
  KEEP(p);
  return 0;
}
