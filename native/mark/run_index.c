#include "run_index.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"

#define CHUNK_BYTES (UINT64_C(1) << UR_RUN_SHIFT)

/* The end of the run of blocks beginning in block i's chunk. A linear
 * pass: galloping read fewer begins but each a cache miss after the one
 * before, and took a heap without runs 10 ms longer, not shorter. */
static size_t chunk_run_end(const uint64_t *pairs, size_t n, size_t i) {
  uint64_t chunk = ur_block_begin(pairs, i) >> UR_RUN_SHIFT;
  size_t j = i + 1;
  while (j < n && ur_block_begin(pairs, j) >> UR_RUN_SHIFT == chunk) j++;
  return j;
}

/* Whether the blocks [i, j), all beginning in one chunk, are enough for an
 * entry and all of one length and spacing. */
static int uniform(const uint64_t *pairs, enum ur_sizes sizes, size_t i, size_t j) {
  if (j - i < UR_RUN_MIN_BEGINS) return 0;
  uint64_t length = ur_block_reach(pairs, i, sizes) - ur_block_begin(pairs, i);
  uint64_t stride = ur_block_begin(pairs, i + 1) - ur_block_begin(pairs, i);
  for (size_t k = i; k < j; k++) {
    if (ur_block_reach(pairs, k, sizes) - ur_block_begin(pairs, k) != length) return 0;
    if (k + 1 < j && ur_block_begin(pairs, k + 1) - ur_block_begin(pairs, k) != stride) return 0;
  }
  return 1;
}

int ur_run_index_build(struct ur_run_index *ri, const uint64_t *pairs, size_t n,
                       enum ur_sizes sizes, uint64_t max_bytes) {
  memset(ri, 0, sizeof(*ri));
  ri->sizes = sizes;
  /* One pass over the blocks, noting where each uniform chunk's blocks
   * start (at most one chunk per UR_RUN_MIN_BEGINS blocks), then the
   * table, sized for what was found. */
  uint32_t *starts = ur_big_calloc(n / UR_RUN_MIN_BEGINS + 1, sizeof(*starts));
  if (!starts) return -ENOMEM;
  size_t chunks = 0;
  for (size_t i = 0, j; i < n; i = j) {
    j = chunk_run_end(pairs, n, i);
    if (uniform(pairs, sizes, i, j)) starts[chunks++] = (uint32_t)i;
  }
  uint64_t size = 1;
  while (size < 2 * (uint64_t)chunks) size <<= 1; /* at most half full */
  int rc = 0;
  if (!chunks || size * sizeof(struct ur_run_entry) > max_bytes) goto out;
  ri->slots = ur_big_calloc(size, sizeof(*ri->slots));
  if (!ri->slots) {
    rc = -ENOMEM;
    goto out;
  }
  ri->mask = size - 1;
  ri->chunks = chunks;
  for (size_t c = 0; c < chunks; c++) {
    size_t i = starts[c], j = chunk_run_end(pairs, n, i);
    uint64_t chunk = ur_block_begin(pairs, i) >> UR_RUN_SHIFT, start = chunk * CHUNK_BYTES;
    /* Blocks do not overlap: only the one before the first begin can reach
     * into the chunk, and at most one byte past that begin (its end, which
     * a lookup at or above the begin never asks for). */
    uint64_t reach = i > 0 ? ur_block_reach(pairs, i - 1, sizes) : 0;
    uint64_t below = reach > start ? reach - start : 0;
    uint64_t slot = ur_page_hash(chunk + 1) & ri->mask;
    while (ri->slots[slot].key) slot = (slot + 1) & ri->mask;
    ri->slots[slot] = (struct ur_run_entry){
        .key = chunk + 1,
        .first = (uint32_t)i,
        .count = (uint32_t)(j - i),
        .begin = (uint32_t)(ur_block_begin(pairs, i) - start),
        .stride = (uint32_t)(ur_block_begin(pairs, i + 1) - ur_block_begin(pairs, i)),
        .length = (uint32_t)(ur_block_reach(pairs, i, sizes) - ur_block_begin(pairs, i)),
        .below = (uint32_t)below,
    };
  }
out:
  ur_big_free(starts);
  return rc;
}

void ur_run_index_answered(const struct ur_run_index *ri, const uint64_t *pairs,
                           uint8_t *answered) {
  if (!ri->slots) return;
  /* From the entries, not the blocks: every block of a chunk but its last
   * reaches no further than the next begin, inside the chunk. */
  for (uint64_t s = 0; s <= ri->mask; s++) {
    const struct ur_run_entry *e = &ri->slots[s];
    if (!e->key) continue;
    memset(answered + e->first, 1, e->count - 1);
    /* The last may reach past the chunk: answered only if every chunk it
     * reaches has an entry (those it spans whole have no begin: none). */
    size_t k = (size_t)e->first + e->count - 1;
    uint64_t last = (ur_block_reach(pairs, k, ri->sizes) - 1) >> UR_RUN_SHIFT;
    uint64_t c = e->key; /* the chunk after its own (key: chunk + 1) */
    while (c <= last && ur_run_entry_of(ri, c)) c++;
    if (c > last) answered[k] = 1;
  }
}

void ur_run_index_free(struct ur_run_index *ri) {
  ur_big_free(ri->slots);
  memset(ri, 0, sizeof(*ri));
}
