/*
 * How the mark core reads the memory it scans, in both places it runs:
 *   - the scanner (native/scanner/memory.c): another process's memory through
 *     /proc/PID/mem, loaded in chunks into a cache;
 *   - the forked snapshot child (native/shim/child.c, mem_direct.c): its own
 *     memory, with plain loads.
 *
 * Both are a "window" [win_lo, win_hi) whose byte at addr sits at addr +
 * win_delta (the child: the identity; the scanner: its most recent chunk),
 * checked inline, and a backend function for everything else.
 */
#ifndef UR_MARK_MEM_H
#define UR_MARK_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define UR_PAGE_SHIFT 12
#define UR_PAGE_SIZE ((uint64_t)1 << UR_PAGE_SHIFT)

struct ur_mem;
typedef const uint8_t *(*ur_mem_slow_fn)(struct ur_mem *m, uint64_t addr, uint64_t end,
                                          uint64_t *avail);

struct ur_mem {
  uint64_t win_lo, win_hi;
  uint64_t win_delta;
  ur_mem_slow_fn slow;    /* addr outside the window: returns a view and may move the window */
  size_t room;            /* further views that can be taken while earlier ones stay valid */
  uint64_t pages_skipped; /* unreadable pages read as zero, each counted once */
  /* Optional (NULL: any byte may be nonzero): the parts of [addr, end) that
   * may hold nonzero bytes, as up to cap [begin, end) pairs in ascending
   * order in out, with *done set to how far the answer reaches (end, or
   * less when out filled up). Returns how many pairs, or -1: not known, read
   * it all. Asked only for long spans (UR_SPARSE_MIN). */
  int (*present)(struct ur_mem *m, uint64_t addr, uint64_t end, uint64_t *out, int cap,
                 uint64_t *done);
  /* Optional (NULL: everything is): whether a view at addr costs no load
   * now (a partial graph's mark reads a dense block at once only then). */
  int (*holds)(struct ur_mem *m, uint64_t addr);
};

/* Spans at least this long are read only where the backend says pages
 * exist (ur_mem.present): a block of a huge, mostly untouched allocation
 * costs its pages in use, not a page fault per page never touched. */
#define UR_SPARSE_MIN ((uint64_t)256 << 10)
#define UR_SPARSE_PARTS 64 /* pairs asked for at once */

/*
 * Bytes at addr, valid until the backend has to replace them (at least for
 * `room` further calls). *avail receives how many bytes from addr are
 * contiguous in the returned buffer (capped at end - addr when end > addr).
 * Unreadable pages read as zero and are counted. Returns NULL only on
 * allocation failure.
 */
static inline const uint8_t *ur_mem_view(struct ur_mem *m, uint64_t addr, uint64_t end,
                                         uint64_t *avail) {
  if (addr - m->win_lo < m->win_hi - m->win_lo) {
    uint64_t n = m->win_hi - addr;
    if (end > addr && end - addr < n) n = end - addr;
    *avail = n;
    return (const uint8_t *)(uintptr_t)(addr + m->win_delta);
  }
  return m->slow(m, addr, end, avail);
}

/* Whether the four words at p are zero. The scan loops test each group of
 * four words so before the range reject of each: most of a heap's words are
 * zero (memory cleared, then partly filled), and a 1 GB heap of small
 * cleared blocks was read in half the instructions. */
static inline int ur_zero_words4(const uint8_t *p) {
  uint64_t a, b, c, d;
  memcpy(&a, p, 8);
  memcpy(&b, p + 8, 8);
  memcpy(&c, p + 16, 8);
  memcpy(&d, p + 24, 8);
  return !(a | b | c | d);
}

/* Calls fn(ctx, begin, end) for the parts of [a, end) to read (a 8-aligned):
 * all of it, or for a span of UR_SPARSE_MIN or more the parts where the
 * backend says pages exist (the rest reads as zero). Stops at fn's first
 * nonzero return and returns it. */
typedef int (*ur_part_fn)(void *ctx, uint64_t begin, uint64_t end);
static inline int ur_mem_each_part(struct ur_mem *m, uint64_t a, uint64_t end, ur_part_fn fn,
                                   void *ctx) {
  while (m->present && a < end && end - a >= UR_SPARSE_MIN) {
    uint64_t parts[2 * UR_SPARSE_PARTS], done;
    int k = m->present(m, a, end, parts, UR_SPARSE_PARTS, &done);
    if (k < 0) break; /* not known: read the rest whole */
    for (int j = 0; j < k; j++) {
      uint64_t b = (parts[2 * j] + 7) & ~UINT64_C(7);
      if (b < parts[2 * j + 1]) {
        int r = fn(ctx, b, parts[2 * j + 1]);
        if (r) return r;
      }
    }
    a = (done + 7) & ~UINT64_C(7);
  }
  return a < end ? fn(ctx, a, end) : 0;
}

static inline int ur_mem_holds(struct ur_mem *m, uint64_t addr) {
  if (addr - m->win_lo < m->win_hi - m->win_lo || !m->holds) return 1;
  return m->holds(m, addr);
}

/* Start loading the line at addr if it is in the window (a hint; never faults). */
static inline void ur_mem_prefetch(const struct ur_mem *m, uint64_t addr) {
  if (addr - m->win_lo < m->win_hi - m->win_lo)
    __builtin_prefetch((const void *)(uintptr_t)(addr + m->win_delta));
}

#endif
