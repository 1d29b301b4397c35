#include "page_index.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "run_index.h"

#define PAGE_BYTES ((uint64_t)1 << UR_PAGE_INDEX_SHIFT)
#define GRANULES 64
/* Blocks between a page's slot prefetch and its insertion: 32, as
 * alloc_index.c's buckets (16 blocks was 4 pages where four blocks begin in
 * each). */
#define PREFETCH_AHEAD 32
/* The index is built only if it answers all but one in this many of the
 * blocks outside the run index's chunks (by where they begin). */
#define UR_PAGE_INDEX_MIN_SHARE 16

/* Slots for `pages` entries: at most half full. */
static uint64_t slots_for(size_t pages) {
  uint64_t size = 1;
  while (size < 2 * (uint64_t)pages) size <<= 1;
  return size;
}

static struct ur_page_entry *slot_for(struct ur_page_index *pi, uint64_t page) {
  uint64_t key = page + 1;
  for (uint64_t i = ur_page_hash(key) & pi->mask;; i = (i + 1) & pi->mask) {
    struct ur_page_entry *e = &pi->slots[i];
    if (e->key == key || !e->key) return e;
  }
}

/* Granules of page wholly inside [b, e). */
static void mark_full(struct ur_page_entry *p, uint64_t page, uint64_t b, uint64_t e) {
  uint64_t start = page * PAGE_BYTES;
  if (e <= start) return;
  uint64_t lo = b <= start ? 0 : (b - start + 15) >> UR_GRANULE_SHIFT;
  uint64_t hi = e >= start + PAGE_BYTES ? GRANULES : (e - start) >> UR_GRANULE_SHIFT;
  if (lo >= hi) return;
  uint64_t bits = hi - lo == 64 ? ~UINT64_C(0) : ((UINT64_C(1) << (hi - lo)) - 1) << lo;
  p->full |= bits;
}

/* Whether a block of the run [i, j) begins off the 16-byte grid: its page's
 * entry is then irregular and answers nothing. */
static int run_off_grid(const uint64_t *pairs, size_t i, size_t j) {
  for (size_t k = i; k < j; k++)
    if (ur_block_begin(pairs, k) & ((1u << UR_GRANULE_SHIFT) - 1)) return 1;
  return 0;
}

/* Whether the page lies in a chunk the run index answers for. */
static int in_runs(const struct ur_run_index *runs, uint64_t page) {
  return runs && ur_run_entry_of(runs, page >> (UR_RUN_SHIFT - UR_PAGE_INDEX_SHIFT)) != NULL;
}

/* If block i begins in a chunk the run index answers for, the end of the
 * blocks beginning in that chunk (a page index's pass skips them at once);
 * else 0. */
static size_t runs_end(const struct ur_run_index *runs, const uint64_t *pairs, size_t i) {
  const struct ur_run_entry *e =
      runs ? ur_run_entry_of(runs, ur_block_begin(pairs, i) >> UR_RUN_SHIFT) : NULL;
  return e ? (size_t)e->first + e->count : 0;
}

/* The end of the run of blocks beginning in block i's page. */
static size_t page_run_end(const uint64_t *pairs, size_t n, size_t i) {
  uint64_t page = ur_block_begin(pairs, i) >> UR_PAGE_INDEX_SHIFT;
  size_t j = i + 1;
  while (j < n && ur_block_begin(pairs, j) >> UR_PAGE_INDEX_SHIFT == page) j++;
  return j;
}

int ur_page_index_build(struct ur_page_index *pi, const uint64_t *pairs, size_t n,
                        enum ur_sizes sizes, uint64_t max_bytes, const struct ur_run_index *runs) {
  memset(pi, 0, sizeof(*pi));
  pi->sizes = sizes;
  /* Pages by how many blocks begin there (more than GRANULES, off the
   * grid, count as GRANULES), then summed from the top: dense[k] pages
   * with at least k begins, holding blocks[k] blocks. */
  size_t dense[GRANULES + 1] = {0}, blocks[GRANULES + 1] = {0};
  for (size_t i = 0, j; i < n; i = j) {
    if ((j = runs_end(runs, pairs, i)) != 0) continue;
    j = page_run_end(pairs, n, i);
    dense[j - i < GRANULES ? j - i : GRANULES]++;
    blocks[j - i < GRANULES ? j - i : GRANULES] += j - i;
  }
  for (size_t k = GRANULES; k > 0; k--) {
    dense[k - 1] += dense[k];
    blocks[k - 1] += blocks[k];
  }
  /* The fewest begins whose pages fit the budget, counted one by one (in
   * powers of two, a heap of 16-1040 B blocks got its pages of 8 or more
   * where those of 5 or more fit). */
  size_t min_begins = 2;
  while (min_begins < GRANULES &&
         slots_for(dense[min_begins]) * sizeof(struct ur_page_entry) > max_bytes)
    min_begins++;
  if (!dense[min_begins] || slots_for(dense[min_begins]) * sizeof(struct ur_page_entry) > max_bytes)
    return 0;
  /* An index that leaves more than one block in UR_PAGE_INDEX_MIN_SHARE to
   * the buckets is not built: every lookup probes it first, so a pointer it
   * does not answer pays its entry's cache miss and then the bucket's and
   * the begins' (prefetched later than without it). See docs/pause.md "The
   * mark's lookups" for the heaps measured. */
  if (blocks[min_begins] < blocks[1] - blocks[1] / UR_PAGE_INDEX_MIN_SHARE) return 0;
  uint64_t size = slots_for(dense[min_begins]);
  pi->slots = ur_big_calloc(size, sizeof(*pi->slots));
  if (!pi->slots) return -ENOMEM;
  pi->mask = size - 1;
  pi->min_begins = min_begins;
  for (size_t i = 0, j; i < n; i = j) {
    if ((j = runs_end(runs, pairs, i)) != 0) continue;
    j = page_run_end(pairs, n, i);
    /* The slot is a random one, a cache miss: the page PREFETCH_AHEAD
     * blocks on has its slot loaded meanwhile. */
    if (j + PREFETCH_AHEAD < n)
      __builtin_prefetch(
          &pi->slots[ur_page_hash((ur_block_begin(pairs, j + PREFETCH_AHEAD) >>
                                   UR_PAGE_INDEX_SHIFT) + 1) & pi->mask],
          1);
    uint64_t page = ur_block_begin(pairs, i) >> UR_PAGE_INDEX_SHIFT;
    if (j - i >= min_begins) {
      struct ur_page_entry *p = slot_for(pi, page);
      *p = (struct ur_page_entry){
          .key = page + 1, .base = (uint32_t)i, .irregular = (uint32_t)run_off_grid(pairs, i, j)};
      /* Blocks do not overlap, so the only one reaching into the page from
       * below (by its reach: one past its end) is the one just before its
       * first begin. */
      if (i > 0)
        mark_full(p, page, ur_block_begin(pairs, i - 1), ur_block_reach(pairs, i - 1, sizes));
      for (size_t k = i; k < j; k++) {
        p->starts |= UINT64_C(1) << ((ur_block_begin(pairs, k) >> UR_GRANULE_SHIFT) & 63);
        mark_full(p, page, ur_block_begin(pairs, k), ur_block_reach(pairs, k, sizes));
      }
      pi->pages++;
    }
  }
  return 0;
}

/* Whether the run of blocks [i, j) beginning in one page has an entry that
 * answers: enough begins, all on the grid, not in the run index's chunks
 * (as the build decides). */
static int run_answers(const struct ur_page_index *pi, const struct ur_run_index *runs,
                       const uint64_t *pairs, size_t i, size_t j) {
  return j - i >= pi->min_begins && !run_off_grid(pairs, i, j) &&
         !in_runs(runs, ur_block_begin(pairs, i) >> UR_PAGE_INDEX_SHIFT);
}

void ur_page_index_answered(const struct ur_page_index *pi, const struct ur_run_index *runs,
                            const uint64_t *pairs, size_t n, uint8_t *answered) {
  memset(answered, 0, n);
  if (!pi->slots) return;
  for (size_t i = 0, j; i < n; i = j) {
    if ((j = runs_end(runs, pairs, i)) != 0) continue;
    j = page_run_end(pairs, n, i);
    if (!run_answers(pi, runs, pairs, i, j)) continue;
    uint64_t page = ur_block_begin(pairs, i) >> UR_PAGE_INDEX_SHIFT;
    for (size_t k = i; k < j; k++) {
      uint64_t last = (ur_block_reach(pairs, k, pi->sizes) - 1) >> UR_PAGE_INDEX_SHIFT;
      /* Blocks do not overlap: a page the block reaches past its own holds
       * no begin but the next block's, so it answers only if it is the next
       * page and the next block's run answers there. */
      if (last == page) answered[k] = 1;
      else if (last == page + 1 && k + 1 == j && j < n &&
               ur_block_begin(pairs, j) >> UR_PAGE_INDEX_SHIFT == last)
        answered[k] = (uint8_t)run_answers(pi, runs, pairs, j, page_run_end(pairs, n, j));
    }
  }
}

void ur_page_index_free(struct ur_page_index *pi) {
  ur_big_free(pi->slots);
  memset(pi, 0, sizeof(*pi));
}
