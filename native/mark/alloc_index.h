/*
 * The allocation index: which allocation, if any, contains a word read from
 * memory. Built over the walker's allocations once they are sorted by begin
 * and freed of overlaps; the heap walker and the reference graph both look
 * words up through it.
 *
 * Lookup: a min/max reject throws out most non-pointer words; the rest go
 * to the run index (run_index.h: 64 KiB chunks of equal, evenly spaced
 * blocks, answered by arithmetic), then the page index (page_index.h: pages
 * dense in small blocks, answered from bitmaps) and otherwise to a hash of
 * address buckets (256 bytes and up) holding the run of allocations
 * overlapping each bucket, then a short binary search inside that run. A
 * plain binary search over 10M begins costs ~20 dependent cache and TLB
 * misses per pointer; the bucket costs one or two, a page entry one, a run
 * entry usually none (its table is small enough to stay in cache).
 *
 * Memory comes from alloc.h (mmap, never malloc): the snapshot child uses it.
 */
#ifndef UR_MARK_ALLOC_INDEX_H
#define UR_MARK_ALLOC_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "page_index.h"
#include "run_index.h"

struct ur_alloc_index {
  size_t n;              /* allocations, sorted by begin, none overlapping */
  const uint64_t *pairs; /* (begin, size) per allocation (ur_block_begin, ur_block_reach) */
  enum ur_sizes sizes;   /* what those sizes are */
  uint64_t lo, hi;     /* [lowest begin, highest reach): the fast reject */
  struct ur_run_index runs;   /* chunks of equal blocks, looked up first */
  struct ur_page_index pages; /* pages dense in small blocks, looked up next */
  struct ur_bucket *buckets;  /* NULL: plain binary search */
  uint64_t bucket_mask;
  unsigned bucket_shift;
  unsigned bucket_passes; /* passes over the blocks that chose bucket_shift */
};

struct ur_bucket {
  uint64_t key;     /* bucket number + 1; 0 = empty slot */
  uint32_t lo, hi;  /* sorted indices of the allocations overlapping the bucket */
};

/* Index the n allocations of pairs (sorted, not overlapping; the array is
 * kept, not copied, and must outlive the index). Returns 0 or -ENOMEM;
 * without room for the buckets lookups fall back to binary search. */
int ur_alloc_index_build(struct ur_alloc_index *ix, const uint64_t *pairs, size_t n,
                         enum ur_sizes sizes);
void ur_alloc_index_free(struct ur_alloc_index *ix);

static inline uint64_t ur_bucket_hash(uint64_t key) {
  return (key * UINT64_C(0x9E3779B97F4A7C15)) >> 20;
}

/* The run of sorted indices that may contain v (the whole array without an
 * index); false if no allocation overlaps v's bucket. */
static inline int ur_alloc_index_range(const struct ur_alloc_index *w, uint64_t v, size_t *lo, size_t *hi) {
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

static inline ssize_t ur_alloc_index_search(const struct ur_alloc_index *w, uint64_t v,
                                            size_t lo, size_t hi) {
  const uint64_t *base = w->pairs + 2 * lo;
  size_t len = hi - lo;
  while (len > 1) {
    size_t half = len / 2;
    base = (base[2 * half] <= v) ? base + 2 * half : base;
    len -= half;
  }
  size_t i = (size_t)(base - w->pairs) / 2;
  return (*base <= v && v < ur_block_reach(w->pairs, i, w->sizes)) ? (ssize_t)i : -1;
}

/* Where v's lookup starts: its page entry if pages are indexed, else its
 * bucket (a prefetch hint for a word read now and looked up soon). */
static inline const void *ur_alloc_index_lookup_line(const struct ur_alloc_index *w,
                                                     uint64_t v) {
  if (w->pages.slots) return ur_page_slot(&w->pages, v);
  if (w->buckets) return &w->buckets[ur_bucket_hash((v >> w->bucket_shift) + 1) & w->bucket_mask];
  return w->pairs;
}

/* Start loading v's bucket, for a word its page entry did not answer: a
 * batch of lookups loads them together rather than one miss after
 * another. */
static inline void ur_alloc_index_prefetch_bucket(const struct ur_alloc_index *w, uint64_t v) {
  if (w->buckets)
    __builtin_prefetch(&w->buckets[ur_bucket_hash((v >> w->bucket_shift) + 1) & w->bucket_mask]);
}

/* What the run and page indexes answer for v (inside [lo, hi)): the sorted
 * index of its allocation, -1, or UR_PAGE_UNKNOWN (ask the buckets). */
static inline ssize_t ur_alloc_index_direct(const struct ur_alloc_index *w, uint64_t v) {
  ssize_t idx = ur_run_find(&w->runs, v);
  return idx != UR_PAGE_UNKNOWN ? idx : ur_page_find(&w->pages, w->pairs, v);
}

/* Sorted index of the allocation v refers to (ur_block_reach: inside it or
 * one past its end), or -1. */
static inline ssize_t ur_alloc_index_find(const struct ur_alloc_index *w, uint64_t v) {
  size_t lo, hi;
  if (v - w->lo >= w->hi - w->lo) return -1;
  ssize_t idx = ur_alloc_index_direct(w, v);
  if (idx != UR_PAGE_UNKNOWN) return idx;
  if (!ur_alloc_index_range(w, v, &lo, &hi)) return -1;
  return ur_alloc_index_search(w, v, lo, hi);
}

#endif
