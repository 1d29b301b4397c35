/*
 * Who holds a block: the mark's reference graph (ref_graph.h), exported
 * with the root words that point into the heap, and two questions asked of
 * it. A shortest chain from the roots to one block (breadth-first, roots in
 * the caller's order of preference), and the dominator tree of the heap
 * below a virtual root whose children are the caller's root regions
 * (Lengauer-Tarjan, the simple version with path compression, iterative:
 * a 10M-block list costs memory, never C stack). A block's retained bytes
 * are those of its subtree: what would become unreachable if it did.
 *
 * Runs in the scanner only, after ur_sweep_run built the graph; memory
 * from alloc.h all the same.
 */
#ifndef UR_MARK_RETENTION_H
#define UR_MARK_RETENTION_H

#include <stddef.h>
#include <stdint.h>

#include "heap_walker.h"

/* A root word that points into a block. For a range root, where is the
 * word's address; for a value root (a register, a kernel-held value),
 * where is the value's index. */
struct ur_root_hit {
  uint64_t where;
  uint64_t value;
  uint32_t region; /* the caller's region id: lower ids are preferred roots */
  uint32_t block;  /* sorted walker index */
};
_Static_assert(sizeof(struct ur_root_hit) == 24, "wire format");

/* A labelled root range (_native.sweep's graph-mode regions): sorted and
 * disjoint; region is the caller's id, as in ur_root_hit. */
struct ur_root_region {
  uint64_t begin, end;
  uint64_t region;
};
_Static_assert(sizeof(struct ur_root_region) == 24, "wire format");

/* Every root word of ranges (begin, end pairs) and values that points into
 * a block. A range word's region is the id of the (begin, end, id) triple
 * of `regions` (sorted, disjoint) that holds it, else default_region; a
 * value's is value_regions[i]. *hits is ur_big_calloc'd, sorted by region,
 * then where. Returns 0 or -ENOMEM. */
int ur_retention_hits(struct ur_walker *w, const uint64_t *ranges, size_t nranges,
                      const uint64_t *values, size_t nvalues, const uint64_t *regions,
                      size_t nregions, const uint32_t *value_regions, uint32_t default_region,
                      struct ur_root_hit **hits, size_t *nhits);

/* A shortest chain to block `target` from the sources (sorted walker
 * indices, in order of preference: of two chains of one length, the one
 * from the earlier source wins). *path gets the blocks from the source to
 * target (ur_big_calloc'd), *source the index in sources of its first.
 * Returns 1 found, 0 no source reaches target, -ENOMEM. Needs w->graph. */
int ur_retention_path(const struct ur_walker *w, const uint32_t *sources, size_t nsources,
                      uint32_t target, uint32_t **path, size_t *len, size_t *source);

/* Offset in block `from` of its first word referring to block `to` (into it
 * or one past its end; that word in *value), or -1. Reads memory through w->mem. */
int64_t ur_retention_edge(struct ur_walker *w, uint32_t from, uint32_t to, uint64_t *value);

/* idom of a block, as ur_retention_dominators writes it. */
#define UR_IDOM_UNREACHED (-1) /* no root reaches it */
#define UR_IDOM_SHARED (-2)    /* reached from several regions, dominated by none */
#define UR_IDOM_REGION(r) (-3 - (int64_t)(r))

/* The dominator tree below a virtual root -> regions 0..nregions-1 ->
 * the blocks hits name -> the graph. Per sorted block: idom[i] (a sorted
 * index, or one of the UR_IDOM_ values), retained[i] (bytes of its
 * subtree, its own included) and retained_count[i]; per region its bytes
 * and blocks. Returns 0 or -ENOMEM. Needs w->graph. */
int ur_retention_dominators(const struct ur_walker *w, const struct ur_root_hit *hits,
                            size_t nhits, uint32_t nregions, int64_t *idom, uint64_t *retained,
                            uint64_t *retained_count, uint64_t *region_bytes,
                            uint64_t *region_count);

/* The live heap grouped from the dominator tree (ur_retention_dominators'
 * idom, retained, retained_count per sorted block). A block's site is
 * keys[i] (its stack id, or any key the caller chose); its top is the
 * region whose subtree holds it, or UR_IDOM_SHARED. */
struct ur_root_site { /* shallow bytes of a site's blocks under one top */
  int64_t top;
  int64_t key;
  uint64_t bytes, count;
};
struct ur_site_total {
  int64_t key;
  uint64_t bytes, count;                   /* its reachable blocks */
  uint64_t retained_bytes, retained_count; /* the subtrees of those with no block of the site above */
  uint64_t largest;                        /* address of the one of those retaining the most */
};
struct ur_site_holder { /* of those subtrees, what each top holds */
  int64_t key;
  int64_t top;
  uint64_t bytes, count;
};
_Static_assert(sizeof(struct ur_root_site) == 32, "wire format");
_Static_assert(sizeof(struct ur_site_total) == 48, "wire format");
_Static_assert(sizeof(struct ur_site_holder) == 32, "wire format");

struct ur_retention_groups {
  struct ur_root_site *root_sites;
  size_t nroot_sites;
  struct ur_site_total *sites;
  size_t nsites;
  struct ur_site_holder *holders;
  size_t nholders;
};

/* Returns 0 or -ENOMEM; free with ur_retention_groups_free. */
int ur_retention_group(const struct ur_walker *w, const int64_t *idom, const uint64_t *retained,
                       const uint64_t *retained_count, const int64_t *keys,
                       struct ur_retention_groups *out);
void ur_retention_groups_free(struct ur_retention_groups *g);

#endif
