/*
 * Pointer lookup for pages dense in small blocks, without a search.
 *
 * For each 1 KiB page where several blocks begin: a bitmap of the 16-byte
 * granules where a block begins, one of the granules wholly inside a block,
 * and the sorted index of the first block beginning in the page. A pointer's
 * block is then that index plus the begins at or below its granule, less
 * one; only a pointer into a block's last, partial granule reads the
 * block's end. One 32-byte entry, one cache line, where the bucket index
 * (heap_walker.h) costs a bucket, then begin and end entries: three misses
 * per pointer on a heap of small blocks, the whole cost of a graph build.
 *
 * Pages with few begins are left to the bucket index (their blocks are big
 * enough that a lookup is cheap beside reading them), as are pages where a
 * block begins off a 16-byte boundary (glibc never does that; a test may);
 * pages of the chunks the run index answers for (run_index.h) are left to
 * it. An index that would leave more than one block in 16 of the rest to
 * the buckets is not built at all: every lookup would probe it first.
 */
#ifndef UR_MARK_PAGE_INDEX_H
#define UR_MARK_PAGE_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sorted_blocks.h"

#define UR_PAGE_INDEX_SHIFT 10

#define UR_GRANULE_SHIFT 4

struct ur_page_entry {
  uint64_t key;      /* page number + 1; 0: an empty slot */
  uint32_t base;     /* sorted index of the first block beginning in the page */
  uint32_t irregular; /* a block begins off a granule boundary: not answered here */
  uint64_t starts;   /* granules where a block begins */
  uint64_t full;     /* granules wholly inside a block */
};

struct ur_run_index;

struct ur_page_index {
  struct ur_page_entry *slots; /* NULL: no index */
  uint64_t mask;
  size_t pages;
  size_t min_begins; /* a page with this many begins is indexed */
  enum ur_sizes sizes; /* the blocks' (ur_block_reach) */
};

/* Build over n sorted, non-overlapping blocks (pairs: ur_block_begin), using
 * at most max_bytes (pages need more begins each until they fit), leaving
 * out the pages of the chunks runs answers for (runs may be NULL). Returns 0
 * or -ENOMEM; with no dense page, no index. */
int ur_page_index_build(struct ur_page_index *pi, const uint64_t *pairs, size_t n,
                        enum ur_sizes sizes, uint64_t max_bytes, const struct ur_run_index *runs);
void ur_page_index_free(struct ur_page_index *pi);

/* For each of the n blocks the index was built over (with runs, as built):
 * whether it answers for every address of the block (so that a lookup there
 * never needs another index). Worked out from begin and end in one pass, not
 * by probing the index: 1 in answered[i] or 0. */
void ur_page_index_answered(const struct ur_page_index *pi, const struct ur_run_index *runs,
                            const uint64_t *pairs, size_t n, uint8_t *answered);

static inline const struct ur_page_entry *ur_page_slot(const struct ur_page_index *pi, uint64_t v) {
  return &pi->slots[ur_page_hash((v >> UR_PAGE_INDEX_SHIFT) + 1) & pi->mask];
}

/* Inline: without -mpopcnt (the baseline x86-64 this builds for) the builtin
 * is a call into libgcc, 2% of a small-block mark. */
static inline unsigned ur_popcount64(uint64_t x) {
#ifdef __POPCNT__
  return (unsigned)__builtin_popcountll(x);
#else
  x -= (x >> 1) & UINT64_C(0x5555555555555555);
  x = (x & UINT64_C(0x3333333333333333)) + ((x >> 2) & UINT64_C(0x3333333333333333));
  x = (x + (x >> 4)) & UINT64_C(0x0F0F0F0F0F0F0F0F);
  return (unsigned)((x * UINT64_C(0x0101010101010101)) >> 56);
#endif
}

/* The entry that answers for page (address >> UR_PAGE_INDEX_SHIFT), or NULL:
 * the page is not indexed, or a block begins there off the grid. */
static inline const struct ur_page_entry *ur_page_entry_of(const struct ur_page_index *pi,
                                                           uint64_t page) {
  if (!pi->slots) return NULL;
  uint64_t key = page + 1;
  for (uint64_t i = ur_page_hash(key) & pi->mask;; i = (i + 1) & pi->mask) {
    const struct ur_page_entry *e = &pi->slots[i];
    if (e->key == key) return e->irregular ? NULL : e;
    if (!e->key) return NULL;
  }
}

/* Sorted index of the block containing v, -1 if none does, or
 * UR_PAGE_UNKNOWN if v's page is not indexed. */
static inline ssize_t ur_page_find(const struct ur_page_index *pi, const uint64_t *pairs,
                                   uint64_t v) {
  const struct ur_page_entry *e = ur_page_entry_of(pi, v >> UR_PAGE_INDEX_SHIFT);
  if (!e) return UR_PAGE_UNKNOWN;
  unsigned g = (unsigned)(v >> UR_GRANULE_SHIFT) & 63;
  uint64_t at_or_below = e->starts & (~UINT64_C(0) >> (63 - g));
  size_t k = (size_t)e->base + (size_t)ur_popcount64(at_or_below);
  if (k == 0) return -1;
  if ((e->full >> g) & 1) return (ssize_t)(k - 1);
  return v < ur_block_reach(pairs, k - 1, pi->sizes) ? (ssize_t)(k - 1) : -1;
}

#endif
