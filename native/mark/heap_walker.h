/*
 * HeapWalker: the conservative mark phase (port of libmemunreachable's
 * HeapWalker). Allocations come from the shim's registry, not from the
 * mappings, so the set is given up front as (begin, size) pairs.
 *
 * Lookup: the allocation index (alloc_index.h), built once the allocations
 * are sorted and freed of overlaps.
 *
 * Marking: first the reference graph (ref_graph.h: every block read once in
 * address order, by a team), then a breadth-first walk of its edges from
 * the roots. Past the graph's budget the mark walks the heap itself from
 * the roots instead, a team sharing work stacks; or, with a partial graph,
 * follows the edges it has and reads the blocks it left out (dense ones)
 * in passes in address order. Each is iterative, so depth (a 10M-element
 * linked list) costs memory, never C stack.
 *
 * Shared by the scanner and the forked snapshot child (native/shim/child.c):
 * memory comes from alloc.h (mmap, never malloc) and is read through mem.h.
 */
#ifndef UR_MARK_HEAP_WALKER_H
#define UR_MARK_HEAP_WALKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "alloc_index.h"
#include "mem.h"
#include "ref_graph.h"
#include "team.h"

#define UR_WALKER_MAX_ALLOCS (UINT32_MAX - 1)
/* Passes over a partial graph's dense blocks, besides one per graph chunk
 * (heap_walker.c, read_passes). */
#define UR_WALKER_EXTRA_PASSES 64

struct ur_walker {
  size_t n;            /* accepted allocations, sorted by begin */
  /* (begin, size) per accepted allocation (ur_block_begin, ur_block_end):
   * the caller's own pairs when they come sorted and without overlaps (the
   * registry's do), else a sorted copy (own) */
  const uint64_t *pairs;
  uint64_t *own;
  uint32_t *orig;      /* index in the caller's array; NULL: the same index */
  const uint64_t *allocs; /* the caller's (begin, size) pairs: kept, not copied */
  uint8_t *marked;
  size_t overlapping;  /* inputs dropped because they overlap an accepted one */
  size_t distinct;     /* inputs with distinct begins (duplicates of a begin dropped) */
  uint64_t distinct_bytes; /* their requested sizes summed */
  struct ur_mem *mem;
  uint64_t bytes_scanned;
  uint64_t handed_over; /* blocks one marking thread gave another (ur_walker_mark_team) */
  unsigned marked_by;   /* threads that took part in the last mark (helpers that started) */
  struct ur_alloc_index index; /* over begin and end */
  uint64_t max_edges;        /* the reference graph's budget; 0: mark by walking */
  struct ur_ref_graph graph; /* valid when has_graph: built by the last mark */
  int has_graph;
  /* Set by the caller: build a partial graph within max_edges rather than
   * walk past it (ref_graph.h), for a reader whose cache cannot hold what
   * the mark touches. Its dense blocks are read in passes (heap_walker.c). */
  int partial_graph;
  uint8_t *pending;    /* per graph chunk: a dense block in it waits for a pass */
  unsigned passes;     /* passes over the dense blocks the last mark took */
};

/* allocs: n pairs (begin, size), any order; must outlive the walker.
 * Overlapping or duplicate ranges keep the first (lowest begin, then lowest
 * input index) as libmemunreachable does. sizes: what the sizes are (how far
 * a block's references reach, ur_block_reach). Returns 0, -ENOMEM or
 * -E2BIG. */
int ur_walker_init(struct ur_walker *w, struct ur_mem *mem, const uint64_t *allocs, size_t n,
                   enum ur_sizes sizes);
void ur_walker_free(struct ur_walker *w);

/* Requested size of sorted allocation i. */
static inline uint64_t ur_walker_size(const struct ur_walker *w, size_t i) {
  return w->pairs[2 * i + 1];
}

static inline uint64_t ur_walker_begin(const struct ur_walker *w, size_t i) {
  return ur_block_begin(w->pairs, i);
}

/* begin + max(size, 1): a zero-size block still owns its address. */
static inline uint64_t ur_walker_end(const struct ur_walker *w, size_t i) {
  return ur_block_end(w->pairs, i);
}

/* Index in the caller's array of sorted allocation i. */
static inline uint32_t ur_walker_orig(const struct ur_walker *w, size_t i) {
  return w->orig ? w->orig[i] : (uint32_t)i;
}

/* Sorted index of the allocation v refers to (ur_block_reach: inside it or
 * one past its end), or -1. */
static inline ssize_t ur_walker_find(const struct ur_walker *w, uint64_t v) {
  return ur_alloc_index_find(&w->index, v);
}

typedef int (*ur_hit_fn)(void *ctx, size_t idx);

/* Calls fn for every 8-aligned word in [begin, end) (start rounded up; the
 * last word may straddle end) whose value refers to an allocation. A
 * nonzero return from fn stops the scan and is returned. */
int ur_walker_scan(struct ur_walker *w, uint64_t begin, uint64_t end, ur_hit_fn fn, void *ctx);

/* Mark everything reachable from the root ranges (pairs begin, end) and the
 * root values (register words). Returns 0, -ENOMEM, or -ERANGE: a partial
 * graph's dense blocks took more passes than its chunks and
 * UR_WALKER_EXTRA_PASSES. */
int ur_walker_mark(struct ur_walker *w, const uint64_t *ranges, size_t nranges,
                   const uint64_t *values, size_t nvalues);

/* ur_walker_mark with n threads: the caller and n - 1 it starts through ops;
 * thread k reads memory through mems[k] (backends keep per-reader state).
 * Threads that fail to start are done without. Same result as one thread. */
int ur_walker_mark_team(struct ur_walker *w, struct ur_mem *const *mems, unsigned n,
                        const struct ur_team_ops *ops, const uint64_t *ranges, size_t nranges,
                        const uint64_t *values, size_t nvalues);

#endif
