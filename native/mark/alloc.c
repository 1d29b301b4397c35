#include "alloc.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "raw_syscall.h"

#define HEADER 64
#define HUGE_MIN ((size_t)2 << 20)

#if defined(__SANITIZE_THREAD__)
/* Test builds under TSan only: it learns of unmapped memory only through
 * libc's mmap and munmap (not mremap), and would take one marking thread's
 * writes to a since-unmapped stack for a race with the next mapping there. */
#define SYS_MMAP(len) (long)mmap(0, (len), PROT_READ | PROT_WRITE, \
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
#define SYS_MUNMAP(p, len) munmap((p), (len))
static long tsan_remap(void *p, size_t old, size_t len) {
  long q = SYS_MMAP(len);
  if (q == -1) return -1;
  memcpy((void *)q, p, old < len ? old : len);
  SYS_MUNMAP(p, old);
  return q;
}
#define SYS_MREMAP(p, old, len) tsan_remap((p), (old), (len))
#else
#define SYS_MMAP(len) ur_sys6(SYS_mmap, 0, (long)(len), PROT_READ | PROT_WRITE, \
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
#define SYS_MUNMAP(p, len) ur_sys2(SYS_munmap, (p), (len))
#define SYS_MREMAP(p, old, len) ur_sys4(SYS_mremap, (p), (old), (len), MREMAP_MAYMOVE)
#endif

void *ur_big_reserve(size_t len) {
  long p = SYS_MMAP(len);
  if (p == -1 || ur_sys_failed(p)) return NULL;
  if (len >= HUGE_MIN) ur_sys3(SYS_madvise, p, len, MADV_HUGEPAGE); /* advisory */
  return (void *)p;
}

void *ur_small_reserve(size_t len) {
  long p = SYS_MMAP(len);
  if (p == -1 || ur_sys_failed(p)) return NULL;
  ur_sys3(SYS_madvise, p, len, MADV_NOHUGEPAGE); /* advisory, as the other */
  return (void *)p;
}

void ur_big_release(void *p, size_t len) {
  if (p) SYS_MUNMAP(p, len);
}

void *ur_big_calloc(size_t n, size_t size) {
  if (size && n > (SIZE_MAX - HEADER) / size) return NULL;
  size_t len = n * size + HEADER;
  uint8_t *p = ur_big_reserve(len);
  if (!p) return NULL;
  *(size_t *)p = len;
  return p + HEADER;
}

void *ur_big_realloc(void *q, size_t bytes) {
  if (!q) return ur_big_calloc(bytes, 1);
  if (bytes > SIZE_MAX - HEADER) return NULL;
  uint8_t *p = (uint8_t *)q - HEADER;
  size_t old = *(size_t *)p, len = bytes + HEADER;
  long r = SYS_MREMAP(p, old, len);
  if (r == -1 || ur_sys_failed(r)) return NULL;
  p = (uint8_t *)r;
  *(size_t *)p = len;
  if (len >= HUGE_MIN && old < HUGE_MIN) ur_sys3(SYS_madvise, p, len, MADV_HUGEPAGE);
  return p + HEADER;
}

void ur_big_free(void *q) {
  if (!q) return;
  uint8_t *p = (uint8_t *)q - HEADER;
  SYS_MUNMAP(p, *(size_t *)p);
}
