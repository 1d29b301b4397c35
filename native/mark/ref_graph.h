/*
 * The heap's reference graph, built by one pass over every allocation in
 * address order: for each block, the blocks its words point into.
 *
 * Why: marking by walking from the roots reads each block when a pointer to
 * it is found, so every block is a random access (a cache miss for its data,
 * more for the index). On heaps of small blocks that walk, not the reading,
 * is the cost: 64-byte blocks were marked at 5% of memcpy bandwidth. Reading
 * the blocks in address order streams them as memcpy does, the pointer
 * lookups of many blocks overlap, and marking then follows the graph: a few
 * bytes per edge that mostly stay in cache. Folding reuses the edges of the
 * unreachable blocks instead of scanning them a second time.
 *
 * The graph costs 4 bytes per allocation and 4 per edge; past a budget (on
 * average UR_GRAPH_EDGES_PER_ALLOC edges per allocation) the build gives up
 * and the walker marks by walking (heap_walker.c). A partial graph never
 * gives up: each chunk of blocks keeps edges up to its share of the budget,
 * and a block whose edges would pass it keeps none and is marked dense, to
 * be read again when the mark reaches it (heap_walker.c's passes).
 */
#ifndef UR_MARK_REF_GRAPH_H
#define UR_MARK_REF_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "alloc_index.h"
#include "mem.h"
#include "team.h"

#define UR_GRAPH_EDGES_PER_ALLOC 3
#define UR_GRAPH_EDGES_FIXED (UINT64_C(1) << 20)
#define UR_GRAPH_CHUNK_SHIFT 12 /* blocks a builder claims at once: 4096 */

/* Edges live in one array per building thread; a chunk of consecutive
 * blocks is built by one thread, its edges contiguous in that thread's
 * array. Self references are left out, as are repeats of the edge just
 * before (a block's run of pointers to one target). */
struct ur_ref_graph {
  uint32_t *first;       /* per sorted block: position of its first edge in its chunk's array */
  uint32_t *chunk_end;   /* per chunk: position after its last edge */
  uint8_t *chunk_array;  /* per chunk: which array holds it */
  uint32_t **arrays;     /* per building thread */
  unsigned narrays;
  size_t n, nchunks;
  uint64_t edges;
  /* A partial graph's bit per block whose edges are not kept (NULL: every
   * block's are). A chunk's bytes are written by the thread building it. */
  uint8_t *dense;
};

/* Build g over the index's allocations, reading memory through mems[0..n)
 * (thread k reads through mems[k]; threads beyond the first started through
 * ops, as ur_walker_mark_team does). Adds the bytes read to *bytes_scanned
 * and sets *threads to the threads that took part. Returns 0, -ENOMEM, or
 * -E2BIG: more edges than max_edges (nothing is kept then). partial: never
 * -E2BIG; each chunk keeps up to max_edges * its blocks / all blocks, the
 * blocks past it dense (ur_ref_graph_dense). */
int ur_ref_graph_build(struct ur_ref_graph *g, const struct ur_alloc_index *ix,
                       struct ur_mem *const *mems, unsigned n, const struct ur_team_ops *ops,
                       uint64_t max_edges, int partial, uint64_t *bytes_scanned,
                       unsigned *threads);
void ur_ref_graph_free(struct ur_ref_graph *g);

/* Whether block i's edges were left out (a partial graph): read it again. */
static inline int ur_ref_graph_dense(const struct ur_ref_graph *g, size_t i) {
  return g->dense && (g->dense[i >> 3] >> (i & 7) & 1);
}

/* The targets of sorted block i. */
static inline const uint32_t *ur_ref_graph_edges(const struct ur_ref_graph *g, size_t i,
                                                 size_t *count) {
  size_t c = i >> UR_GRAPH_CHUNK_SHIFT, next = i + 1;
  uint32_t b = g->first[i];
  uint32_t e =
      next < g->n && (next >> UR_GRAPH_CHUNK_SHIFT) == c ? g->first[next] : g->chunk_end[c];
  *count = e - b;
  return g->arrays[g->chunk_array[c]] + b;
}

#endif
