#include "alloc_index.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"

/* The run and page indexes' budget together: 8 bytes per allocation (a heap
 * of 64-byte blocks needs about 5) and a fixed megabyte. */
#define PAGE_INDEX_BYTES_PER_ALLOC 8
#define PAGE_INDEX_FIXED_BYTES (UINT64_C(1) << 20)
/* Allocations per bucket entry at most (build_buckets). */
#define BUCKET_ALLOCS_PER_ENTRY 4
/* Blocks between a bucket's prefetch and its insertion: 64, not 16, where
 * four 240-byte blocks share each 1 KiB bucket 16 blocks on was 4 buckets
 * on, too near for the slot to arrive (the insert's probe was half the
 * index's build); 4.16M blocks indexed in 38 ms instead of 52-54, those
 * of 16-1040 bytes in 130 instead of 142 (with page_index.c's). */
#define PREFETCH_AHEAD 64

/* Bucket entries needed with 2^shift-byte buckets (a bucket shared by the
 * end of one allocation and the start of the next counts once), leaving out
 * the blocks the page index answers for (skip). sizes is a constant where
 * this is inlined (count_buckets): ur_block_reach's test for usable sizes
 * leaves the loop. */
static inline __attribute__((always_inline)) uint64_t count_buckets_as(
    const struct ur_alloc_index *w, unsigned shift, const uint8_t *skip, enum ur_sizes sizes) {
  uint64_t total = 0, last = UINT64_MAX;
  for (size_t i = 0; i < w->n; i++) {
    if (skip[i]) continue;
    uint64_t first = ur_block_begin(w->pairs, i) >> shift;
    uint64_t final = (ur_block_reach(w->pairs, i, sizes) - 1) >> shift;
    total += final - first + (first != last);
    last = final;
  }
  return total;
}

static uint64_t count_buckets(const struct ur_alloc_index *w, unsigned shift,
                              const uint8_t *skip) {
  return w->sizes == UR_SIZES_USABLE ? count_buckets_as(w, shift, skip, UR_SIZES_USABLE)
                                     : count_buckets_as(w, shift, skip, UR_SIZES_REQUESTED);
}

/* The smallest shift from 8 to 40 whose buckets number at most limit (else
 * 40), and their count. The blocks are sorted and apart, so the count is
 * that of the distinct buckets they touch, and one shift more at least
 * halves it: from count C at a shift, no shift less than log2(C / limit)
 * more can do, and those are not counted (the heap of 16-1040 B blocks
 * went from five passes over its blocks to two). */
static unsigned bucket_shift(struct ur_alloc_index *w, const uint8_t *skip, uint64_t limit,
                             uint64_t *count) {
  unsigned shift = 8;
  *count = count_buckets(w, shift, skip);
  w->bucket_passes = 1;
  while (*count > limit && shift < 40) {
    unsigned more = 1;
    while (more < 32 && (*count >> more) > limit) more++;
    shift = shift + more < 40 ? shift + more : 40;
    *count = count_buckets(w, shift, skip);
    w->bucket_passes++;
  }
  return shift;
}

/* The buckets' entries (build_buckets), sizes a constant as in count_buckets_as. */
static inline __attribute__((always_inline)) void fill_buckets_as(
    const struct ur_alloc_index *w, const uint8_t *skip, struct ur_bucket *t, uint64_t mask,
    unsigned shift, enum ur_sizes sizes) {
  struct ur_bucket *cur = NULL;
  /* A bucket's run of indices may span blocks left out: a search only
   * steps over them. Each new bucket is a probe of a random slot, a cache
   * miss: the slot of the block PREFETCH_AHEAD on is loaded meanwhile. */
  for (size_t i = 0; i < w->n; i++) {
    if (i + PREFETCH_AHEAD < w->n && !skip[i + PREFETCH_AHEAD])
      __builtin_prefetch(
          &t[ur_bucket_hash((ur_block_begin(w->pairs, i + PREFETCH_AHEAD) >> shift) + 1) & mask],
          1);
    if (skip[i]) continue;
    uint64_t first = ur_block_begin(w->pairs, i) >> shift;
    uint64_t final = (ur_block_reach(w->pairs, i, sizes) - 1) >> shift;
    for (uint64_t b = first;; b++) {
      if (cur && cur->key == b + 1) {
        cur->hi = (uint32_t)i + 1;
      } else {
        uint64_t j = ur_bucket_hash(b + 1) & mask;
        while (t[j].key) j = (j + 1) & mask;
        cur = &t[j];
        *cur = (struct ur_bucket){b + 1, (uint32_t)i, (uint32_t)i + 1};
      }
      if (b == final) break;
    }
  }
}

/* The buckets, for the blocks the run and page indexes do not answer for: a
 * lookup there never reaches them. Most blocks of a heap of small ones are left out
 * so, which spares the build its hashed writes (10M blocks: ~0.25 s). */
static void build_buckets(struct ur_alloc_index *w) {
  uint8_t *skip = ur_big_calloc(w->n, 1);
  if (!skip) return; /* binary search still works */
  ur_page_index_answered(&w->pages, &w->runs, w->pairs, w->n, skip);
  ur_run_index_answered(&w->runs, w->pairs, skip);
  /* The smallest buckets (from 256 bytes) that keep the index within one
   * entry per four allocations, the table at most two thirds full: at most
   * 11 bytes per allocation (two entries per allocation in a half-full
   * table took 64-128, the scanner's largest structure on a heap of mixed
   * small blocks). The search inside a bucket then steps over a few
   * neighbouring begins, which share a cache line or two. Huge allocations
   * push the buckets up (one entry per bucket they span). */
  uint64_t limit = (uint64_t)w->n / BUCKET_ALLOCS_PER_ENTRY + 4096, count;
  unsigned shift = bucket_shift(w, skip, limit, &count);
  uint64_t size = 1;
  while (count <= limit && 2 * size < 3 * count) size <<= 1;
  struct ur_bucket *t = count <= limit ? ur_big_calloc(size, sizeof(*t)) : NULL;
  if (!t) goto out; /* binary search still works */
  uint64_t mask = size - 1;
  if (w->sizes == UR_SIZES_USABLE)
    fill_buckets_as(w, skip, t, mask, shift, UR_SIZES_USABLE);
  else
    fill_buckets_as(w, skip, t, mask, shift, UR_SIZES_REQUESTED);
  w->buckets = t;
  w->bucket_mask = mask;
  w->bucket_shift = shift;
out:
  ur_big_free(skip);
}

int ur_alloc_index_build(struct ur_alloc_index *ix, const uint64_t *pairs, size_t n,
                         enum ur_sizes sizes) {
  memset(ix, 0, sizeof(*ix));
  ix->n = n;
  ix->pairs = pairs;
  ix->sizes = sizes;
  if (!n) return 0;
  ix->lo = ur_block_begin(pairs, 0);
  ix->hi = ur_block_reach(pairs, n - 1, sizes);
  uint64_t bytes = PAGE_INDEX_BYTES_PER_ALLOC * (uint64_t)n + PAGE_INDEX_FIXED_BYTES;
  if (ur_run_index_build(&ix->runs, pairs, n, sizes, bytes) < 0) return -ENOMEM;
  bytes -= ur_run_index_bytes(&ix->runs);
  if (ur_page_index_build(&ix->pages, pairs, n, sizes, bytes, &ix->runs) < 0) {
    ur_run_index_free(&ix->runs);
    return -ENOMEM;
  }
  build_buckets(ix); /* for the blocks neither answers for */
  return 0;
}

void ur_alloc_index_free(struct ur_alloc_index *ix) {
  ur_big_free(ix->buckets);
  ur_page_index_free(&ix->pages);
  ur_run_index_free(&ix->runs);
  memset(ix, 0, sizeof(*ix));
}
