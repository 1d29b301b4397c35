/*
 * Pointer lookup for stretches of equal blocks, by arithmetic.
 *
 * For each 64 KiB chunk where at least UR_RUN_MIN_BEGINS blocks begin, all
 * of one length and evenly spaced (an allocator's run of one size class):
 * where the first begins, the spacing, the length, how many, and how far the
 * block before them reaches into the chunk. A pointer's block is then one
 * division away, and every address of such a chunk is answered here (a
 * block, or none), so the page index and the buckets hold nothing for it.
 * One 32-byte entry per chunk: a 1 GB heap of one size takes 16K of them, a
 * table that stays in cache, where each pointer into a page of four 240-byte
 * blocks (too few begins for the page index's budget) cost a bucket of a
 * 32 MB table and a search of the blocks' begins and sizes.
 */
#ifndef UR_MARK_RUN_INDEX_H
#define UR_MARK_RUN_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sorted_blocks.h"

#define UR_RUN_SHIFT 16
/* Begins a chunk needs: the table then takes at most 8 bytes per block it
 * answers for (a quarter-full table of 32-byte entries, one per 16 blocks). */
#define UR_RUN_MIN_BEGINS 16

struct ur_run_entry {
  uint64_t key;    /* chunk number + 1; 0: an empty slot */
  uint32_t first;  /* sorted index of the first block beginning in the chunk */
  uint32_t count;  /* blocks beginning in the chunk */
  uint32_t begin;  /* the first one's offset in the chunk */
  uint32_t stride; /* from one begin to the next */
  uint32_t length; /* each block's reach less its begin (ur_block_reach) */
  uint32_t below;  /* offsets under this one are inside block first - 1 */
};

struct ur_run_index {
  struct ur_run_entry *slots; /* NULL: no index */
  uint64_t mask;
  size_t chunks;
  enum ur_sizes sizes; /* the blocks' (ur_block_reach) */
};

/* Build over n sorted, non-overlapping blocks (pairs: ur_block_begin), using
 * at most max_bytes (else no index). Returns 0 or -ENOMEM. */
int ur_run_index_build(struct ur_run_index *ri, const uint64_t *pairs, size_t n,
                       enum ur_sizes sizes, uint64_t max_bytes);
void ur_run_index_free(struct ur_run_index *ri);

static inline uint64_t ur_run_index_bytes(const struct ur_run_index *ri) {
  return ri->slots ? (ri->mask + 1) * sizeof(struct ur_run_entry) : 0;
}

/* Sets answered[i] for each block (of those the index was built over) whose
 * every address lies in a chunk the index answers for; others are left as
 * they are. */
void ur_run_index_answered(const struct ur_run_index *ri, const uint64_t *pairs,
                           uint8_t *answered);

/* The entry of chunk (address >> UR_RUN_SHIFT), or NULL. */
static inline const struct ur_run_entry *ur_run_entry_of(const struct ur_run_index *ri,
                                                         uint64_t chunk) {
  if (!ri->slots) return NULL;
  uint64_t key = chunk + 1;
  for (uint64_t i = ur_page_hash(key) & ri->mask;; i = (i + 1) & ri->mask) {
    const struct ur_run_entry *e = &ri->slots[i];
    if (e->key == key) return e;
    if (!e->key) return NULL;
  }
}

/* Sorted index of the block containing v, -1 if none does, or
 * UR_PAGE_UNKNOWN if v's chunk is not indexed. */
static inline ssize_t ur_run_find(const struct ur_run_index *ri, uint64_t v) {
  const struct ur_run_entry *e = ur_run_entry_of(ri, v >> UR_RUN_SHIFT);
  if (!e) return UR_PAGE_UNKNOWN;
  uint32_t off = (uint32_t)(v & ((UINT64_C(1) << UR_RUN_SHIFT) - 1));
  if (off < e->begin) return off < e->below ? (ssize_t)e->first - 1 : -1;
  uint32_t j = (off - e->begin) / e->stride;
  if (j >= e->count) j = e->count - 1; /* past the last begin: inside the last block or none */
  return off - e->begin - j * e->stride < e->length ? (ssize_t)(e->first + j) : -1;
}

#endif
