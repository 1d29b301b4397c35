/*
 * Arming and taking down write tracking, piece by piece: what the shim's
 * helper does in its own process (native/shim/write_tracking.c) and the
 * scanner does through a duplicate of the helper's userfaultfd
 * (native/scanner/write_protect.c). A userfaultfd's ioctls act on the memory
 * of the process that opened it, whoever calls them; PAGEMAP_SCAN on a
 * process's pagemap walks that process's page tables.
 */
#ifndef UNREACHABLE_WRITE_PROTECT_H
#define UNREACHABLE_WRITE_PROTECT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

#include "unreachable/linux_compat.h"

/* The most one walk over the page tables covers at a time. Unregistering
 * holds the mmap lock for writing while it clears the protection of every
 * page (about 35 ms per GiB of present pages), and protecting holds it for
 * reading (10-18 ms per GiB): meanwhile every thread that maps, unmaps,
 * changes protections (glibc growing an arena) or faults waits. In pieces,
 * the lock is let go between them: no thread waits longer than one. */
#define UR_WALK_CHUNK ((uint64_t)8 << 20)

/* Anonymous memory: only the pages that exist. UFFDIO_WRITEPROTECT would
 * put a marker in every absent page too, building page tables for all of a
 * sparse reservation (measured: 128 MiB of them for 64 GiB reserved, kept
 * after the scan); an absent anonymous page is zero, which the scanner
 * knows without reading it, and one that appears later carries no
 * protection, so the scanner sees it written. The walk is given an output
 * vector (vec, vec_len) although nothing reads it: without one the kernel
 * takes a fast path that marks the absent pages of every page table it
 * passes. 0, or -1 with errno. */
static inline int ur_protect_present(int pagemap, uint64_t lo, uint64_t hi,
                                     struct page_region *vec, size_t vec_len) {
  for (uint64_t pos = lo; pos < hi;) {
    struct pm_scan_arg a = {
        .size = sizeof(a),
        .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
        .start = pos,
        .end = hi - pos > UR_WALK_CHUNK ? pos + UR_WALK_CHUNK : hi,
        .vec = (uint64_t)(uintptr_t)vec,
        .vec_len = vec_len,
        .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        .return_mask = PAGE_IS_PRESENT,
    };
    if (ioctl(pagemap, PAGEMAP_SCAN, &a) < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (a.walk_end <= pos) return -1;
    pos = a.walk_end;
  }
  return 0;
}

/* Write-protect [lo, hi) through uffd, at most UR_WALK_CHUNK at a time
 * (UFFDIO_WRITEPROTECT holds the mmap lock for reading over its whole walk:
 * 55-60 ms for 2.1 GB of present pages in one call). The pieces end on
 * 2 MiB boundaries, so that none cuts a transparent huge page in two. A
 * piece refused with ENOENT (no registered mapping there any more) is
 * passed over when skip_gone, and the rest protected. 0, or -1 with errno. */
static inline int ur_writeprotect_pieces(int uffd, uint64_t lo, uint64_t hi, int skip_gone) {
  for (uint64_t pos = lo; pos < hi;) {
    uint64_t end = (pos + UR_WALK_CHUNK) & ~(((uint64_t)2 << 20) - 1);
    if (end > hi) end = hi;
    struct uffdio_writeprotect wp = {.range = {pos, end - pos}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    if (ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) != 0 && !(skip_gone && errno == ENOENT)) return -1;
    pos = end;
  }
  return 0;
}

/* Unregister [lo, hi) from uffd. UFFDIO_UNREGISTER wakes the range's
 * waiters before it clears the range's protection, and a thread that
 * faults under the per-VMA lock in between waits after that wake, until
 * the descriptor's last copy is closed (a stopped scanner's, a child's
 * forked meanwhile): the wake after it lets that thread go. */
static inline void ur_unregister_pieces(int uffd, uint64_t lo, uint64_t hi) {
  for (uint64_t pos = lo; pos < hi; pos += UR_WALK_CHUNK) {
    struct uffdio_range range = {pos, hi - pos > UR_WALK_CHUNK ? UR_WALK_CHUNK : hi - pos};
    ioctl(uffd, UFFDIO_UNREGISTER, &range);
    ioctl(uffd, UFFDIO_WAKE, &range);
  }
}

#endif
