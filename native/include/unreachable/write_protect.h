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

/* The next runs of pages (present, swapped, or a protection marker, which
 * the pagemap counts as swapped) of [pos, hi), into vec: at most a piece's
 * worth of them, so the walk holds the mmap lock (for reading) no longer
 * than a piece, however far apart they lie; a stretch without page tables
 * costs the walk next to nothing. How many runs, *walk_end where the walk
 * stopped (past it nothing was looked at); -1 with errno. */
static inline int ur_pages_ahead(int pagemap, uint64_t pos, uint64_t hi, struct page_region *vec,
                                 size_t vec_len, uint64_t *walk_end) {
  for (;;) {
    struct pm_scan_arg a = {
        .size = sizeof(a),
        .start = pos,
        .end = hi,
        .vec = (uint64_t)(uintptr_t)vec,
        .vec_len = vec_len,
        .max_pages = UR_WALK_CHUNK / 4096,
        .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        .return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
    };
    int n = ioctl(pagemap, PAGEMAP_SCAN, &a);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (a.walk_end <= pos) {
      errno = EIO;
      return -1;
    }
    *walk_end = a.walk_end;
    return n;
  }
}

#define UR_HUGE_PAGE ((uint64_t)2 << 20)

/* Protect the present pages of [lo, hi) in pieces of at most UR_WALK_CHUNK
 * that end on 2 MiB boundaries: the kernel splits a transparent huge page
 * that a protecting walk covers in part. */
static inline int ur_protect_range(int pagemap, uint64_t lo, uint64_t hi, struct page_region *vec,
                                   size_t vec_len) {
  for (uint64_t pos = lo; pos < hi;) {
    uint64_t end = (pos + UR_WALK_CHUNK) & ~(UR_HUGE_PAGE - 1);
    if (end > hi) end = hi;
    struct pm_scan_arg a = {
        .size = sizeof(a),
        .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
        .start = pos,
        .end = end,
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

/* Anonymous memory: only the pages that exist. UFFDIO_WRITEPROTECT would
 * put a marker in every absent page too, building page tables for all of a
 * sparse reservation (measured: 128 MiB of them for 64 GiB reserved, kept
 * after the scan); an absent anonymous page is zero, which the scanner
 * knows without reading it, and one that appears later carries no
 * protection, so the scanner sees it written. The runs of pages are found
 * first (ur_pages_ahead) and only they are protected, each widened to the
 * 2 MiB boundaries around it within [lo, hi) so that no huge page is cut:
 * a read-write reservation that holds no page (MariaDB's 8 TiB) costs a
 * few calls, where protecting it 8 MiB at a time took a million. The
 * protecting walk is given an output vector (vec, vec_len) although
 * nothing reads it: without one the kernel takes a fast path that marks
 * the absent pages of every page table it passes. Without the runs (no
 * page to find, or a walk refused) it goes over all of [lo, hi) in pieces.
 * 0, or -1 with errno. */
static inline int ur_protect_present(int pagemap, uint64_t lo, uint64_t hi,
                                     struct page_region *vec, size_t vec_len) {
  struct page_region runs[64];
  uint64_t pos = lo, done = lo;
  while (pos < hi) {
    uint64_t walk_end;
    int n = ur_pages_ahead(pagemap, pos, hi, runs, sizeof runs / sizeof runs[0], &walk_end);
    if (n < 0) return ur_protect_range(pagemap, done, hi, vec, vec_len);
    for (int i = 0; i < n; i++) {
      uint64_t b = runs[i].start & ~(UR_HUGE_PAGE - 1), e = runs[i].end + UR_HUGE_PAGE - 1;
      e &= ~(UR_HUGE_PAGE - 1);
      if (b < done) b = done;
      if (e > hi) e = hi;
      if (b < e && ur_protect_range(pagemap, b, e, vec, vec_len) != 0) return -1;
      if (e > done) done = e;
    }
    pos = walk_end;
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
 * forked meanwhile): the wake after it lets that thread go. piece:
 * UR_WALK_CHUNK, or the whole range where it holds no page. */
static inline void ur_unregister_pieces(int uffd, uint64_t lo, uint64_t hi, uint64_t piece) {
  for (uint64_t pos = lo; pos < hi; pos += piece) {
    struct uffdio_range range = {pos, hi - pos > piece ? piece : hi - pos};
    ioctl(uffd, UFFDIO_UNREGISTER, &range);
    ioctl(uffd, UFFDIO_WAKE, &range);
  }
}

/* Unregister [lo, hi) at a cost that follows its pages, not its size: the
 * runs of pages in UR_WALK_CHUNK pieces (each clearing its protection
 * under the mmap lock held for writing), each stretch between them in one
 * call, which clears no protection and so walks no page. Without the
 * pagemap (pagemap < 0: a process that changed its uid, a chroot) all of
 * it goes in pieces. A page that appears meanwhile in a stretch costs that
 * call its walk, no more. */
static inline void ur_unregister_present(int uffd, int pagemap, uint64_t lo, uint64_t hi,
                                         struct page_region *vec, size_t vec_len) {
  uint64_t pos = lo;
  while (pagemap >= 0 && pos < hi) {
    uint64_t walk_end;
    int n = ur_pages_ahead(pagemap, pos, hi, vec, vec_len, &walk_end);
    if (n < 0) break;
    for (int i = 0; i < n; i++) {
      if (vec[i].start > pos) ur_unregister_pieces(uffd, pos, vec[i].start, vec[i].start - pos);
      ur_unregister_pieces(uffd, vec[i].start, vec[i].end, UR_WALK_CHUNK);
      pos = vec[i].end;
    }
    if (walk_end > pos) ur_unregister_pieces(uffd, pos, walk_end, walk_end - pos);
    pos = walk_end;
  }
  if (pos < hi) ur_unregister_pieces(uffd, pos, hi, UR_WALK_CHUNK);
}

#endif
