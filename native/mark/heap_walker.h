/*
 * HeapWalker: the conservative mark phase (port of libmemunreachable's
 * HeapWalker). Allocations come from the shim's registry, not from the
 * mappings, so the set is given up front as (begin, size) pairs.
 *
 * Lookup: a min/max reject throws out most non-pointer words; the rest go
 * to the page index (page_index.h: pages dense in small blocks, answered
 * from bitmaps) and otherwise to a hash of address buckets (256 bytes and
 * up) holding the run of allocations overlapping each bucket, then a short
 * binary search inside that run. A plain binary search over 10M begins costs
 * ~20 dependent cache and TLB misses per pointer; the bucket costs one or
 * two, a page entry one.
 *
 * Marking: first the reference graph (ref_graph.h: every block read once in
 * address order, by a team), then a breadth-first walk of its edges from
 * the roots. Past the graph's budget the mark walks the heap itself from
 * the roots instead, a team sharing work stacks. Either is iterative, so
 * depth (a 10M-element linked list) costs memory, never C stack.
 *
 * Shared by the scanner and the forked snapshot child (native/shim/child.c):
 * memory comes from alloc.h (mmap, never malloc) and is read through mem.h.
 */
#ifndef UR_MARK_HEAP_WALKER_H
#define UR_MARK_HEAP_WALKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mem.h"
#include "page_index.h"
#include "ref_graph.h"

#define UR_WALKER_MAX_ALLOCS (UINT32_MAX - 1)

struct ur_walker {
  size_t n;            /* accepted allocations, sorted by begin */
  uint64_t *begin;
  uint64_t *end;       /* begin + max(size, 1): a zero-size block still owns its address */
  uint32_t *orig;      /* index in the caller's array */
  const uint64_t *allocs; /* the caller's (begin, size) pairs: kept, not copied */
  uint8_t *marked;
  uint64_t lo, hi;     /* [lowest begin, highest end): the fast reject */
  size_t overlapping;  /* inputs dropped because they overlap an accepted one */
  size_t distinct;     /* inputs with distinct begins (duplicates of a begin dropped) */
  uint64_t distinct_bytes; /* their requested sizes summed */
  struct ur_mem *mem;
  uint64_t bytes_scanned;
  uint64_t handed_over; /* blocks one marking thread gave another (ur_walker_mark_team) */
  unsigned marked_by;   /* threads that took part in the last mark (helpers that started) */
  struct ur_page_index pages; /* pages dense in small blocks, looked up first */
  struct ur_bucket *buckets; /* NULL: plain binary search */
  uint64_t bucket_mask;
  unsigned bucket_shift;
  uint64_t max_edges;        /* the reference graph's budget; 0: mark by walking */
  struct ur_ref_graph graph; /* valid when has_graph: built by the last mark */
  int has_graph;
};

struct ur_bucket {
  uint64_t key;     /* bucket number + 1; 0 = empty slot */
  uint32_t lo, hi;  /* sorted indices of the allocations overlapping the bucket */
};

/* allocs: n pairs (begin, size), any order; must outlive the walker.
 * Overlapping or duplicate ranges keep the first (lowest begin, then lowest
 * input index) as libmemunreachable does. Returns 0, -ENOMEM or -E2BIG. */
int ur_walker_init(struct ur_walker *w, struct ur_mem *mem, const uint64_t *allocs, size_t n);
void ur_walker_free(struct ur_walker *w);

/* Requested size of sorted allocation i. */
static inline uint64_t ur_walker_size(const struct ur_walker *w, size_t i) {
  return w->allocs[2 * (size_t)w->orig[i] + 1];
}

static inline uint64_t ur_bucket_hash(uint64_t key) {
  return (key * UINT64_C(0x9E3779B97F4A7C15)) >> 20;
}

/* The run of sorted indices that may contain v (the whole array without an
 * index); false if no allocation overlaps v's bucket. */
static inline int ur_walker_range(const struct ur_walker *w, uint64_t v, size_t *lo, size_t *hi) {
  if (!w->buckets) {
    *lo = 0;
    *hi = w->n;
    return 1;
  }
  uint64_t key = (v >> w->bucket_shift) + 1;
  for (uint64_t i = ur_bucket_hash(key) & w->bucket_mask;; i = (i + 1) & w->bucket_mask) {
    const struct ur_bucket *b = &w->buckets[i];
    if (b->key == key) {
      *lo = b->lo;
      *hi = b->hi;
      return 1;
    }
    if (b->key == 0) return 0;
  }
}

static inline ssize_t ur_walker_search(const struct ur_walker *w, uint64_t v, size_t lo,
                                       size_t hi) {
  const uint64_t *base = w->begin + lo;
  size_t len = hi - lo;
  while (len > 1) {
    size_t half = len / 2;
    base = (base[half] <= v) ? base + half : base;
    len -= half;
  }
  size_t i = (size_t)(base - w->begin);
  return (*base <= v && v < w->end[i]) ? (ssize_t)i : -1;
}

/* Where v's lookup starts: its page entry if pages are indexed, else its
 * bucket (a prefetch hint for a word read now and looked up soon). */
static inline const void *ur_walker_lookup_line(const struct ur_walker *w, uint64_t v) {
  if (w->pages.slots) return ur_page_slot(&w->pages, v);
  if (w->buckets) return &w->buckets[ur_bucket_hash((v >> w->bucket_shift) + 1) & w->bucket_mask];
  return w->begin;
}

/* Sorted index of the allocation containing v, or -1. One past the end is
 * outside. */
static inline ssize_t ur_walker_find(const struct ur_walker *w, uint64_t v) {
  size_t lo, hi;
  if (v - w->lo >= w->hi - w->lo) return -1;
  ssize_t idx = ur_page_find(&w->pages, w->end, v);
  if (idx != UR_PAGE_UNKNOWN) return idx;
  if (!ur_walker_range(w, v, &lo, &hi)) return -1;
  return ur_walker_search(w, v, lo, hi);
}

typedef int (*ur_hit_fn)(void *ctx, size_t idx);

/* Calls fn for every 8-aligned word in [begin, end) (start rounded up; the
 * last word may straddle end) whose value lies inside an allocation. A
 * nonzero return from fn stops the scan and is returned. */
int ur_walker_scan(struct ur_walker *w, uint64_t begin, uint64_t end, ur_hit_fn fn, void *ctx);

/* Mark everything reachable from the root ranges (pairs begin, end) and the
 * root values (register words). Returns 0 or -ENOMEM. */
int ur_walker_mark(struct ur_walker *w, const uint64_t *ranges, size_t nranges,
                   const uint64_t *values, size_t nvalues);

/* How the caller runs the extra marking threads (pthreads; raw clones in the
 * snapshot child, which may not use libc). */
struct ur_team_ops {
  int (*start)(void *ctx, void (*fn)(void *), void *arg); /* 0, or -errno: not started */
  void (*join)(void *ctx);                                /* wait for every started one */
  void *ctx;
};

#define UR_WALKER_MAX_TEAM 64u

/* ur_walker_mark with n threads: the caller and n - 1 it starts through ops;
 * thread k reads memory through mems[k] (backends keep per-reader state).
 * Threads that fail to start are done without. Same result as one thread. */
int ur_walker_mark_team(struct ur_walker *w, struct ur_mem *const *mems, unsigned n,
                        const struct ur_team_ops *ops, const uint64_t *ranges, size_t nranges,
                        const uint64_t *values, size_t nvalues);

#endif
