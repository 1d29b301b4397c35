/*
 * LeakFolding: group unreachable allocations so that one leaked list head is
 * reported once with "referencing N bytes in M allocations" rather than as
 * M+1 unrelated leaks (port of libmemunreachable's LeakFolding, made
 * iterative: its recursive Tarjan and accumulation overflowed small stacks).
 *
 * Semantics kept exactly: strongly connected components of the graph of
 * pointers between unreachable blocks; an SCC with no in-edge from another
 * SCC dominates; every member of a dominating SCC is one reported leak with
 * referenced_count = (blocks reachable from the SCC, its own included) - 1
 * and referenced_size = (their bytes) - the member's own size. An SCC below
 * two dominators counts for both; a diamond below one counts once.
 */
#ifndef UR_MARK_LEAK_FOLDING_H
#define UR_MARK_LEAK_FOLDING_H

#include <stddef.h>
#include <stdint.h>

#include "heap_walker.h"

struct ur_leak { /* the wire record of _native.sweep()["leaks"] */
  uint32_t index;
  uint32_t reserved;
  uint64_t referenced_count;
  uint64_t referenced_size;
};
_Static_assert(sizeof(struct ur_leak) == 24, "wire format");

/*
 * The graph part: nodes 0..n-1, edges of node v in adj[off[v] .. off[v+1]),
 * self-edges and duplicates allowed. Writes one leak per member of a
 * dominating SCC to *leaks (ur_big_calloc'd, node order, index = node id).
 * Returns 0 or -ENOMEM.
 */
int ur_fold_graph(size_t n, const uint64_t *size, const size_t *off, const uint32_t *adj,
                  struct ur_leak **leaks, size_t *nleaks);

/*
 * The walker part: after ur_walker_mark, builds the graph over the unmarked
 * allocations (reading their memory again) and folds it. *unreachable gets
 * the caller's indices of all unmarked allocations in address order; leak
 * indices are the caller's indices too. Returns 0 or -ENOMEM.
 */
int ur_fold_leaks(struct ur_walker *w, uint32_t **unreachable, size_t *nunreachable,
                  struct ur_leak **leaks, size_t *nleaks);

#endif
