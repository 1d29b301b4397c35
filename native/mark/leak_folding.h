/*
 * LeakFolding: group unreachable allocations so that one leaked list head is
 * reported once with "referencing N bytes in M allocations" rather than as
 * M+1 unrelated leaks (after libmemunreachable's LeakFolding, made
 * iterative: its recursive Tarjan and accumulation overflowed small stacks).
 *
 * The leaks are libmemunreachable's: the strongly connected components of
 * the graph of pointers between unreachable blocks that no other component
 * points into dominate, and every member of one is a reported leak. What
 * each references differs: libmemunreachable counts every block a component
 * reaches under each of its members and under every component reaching it,
 * so the references add up to more than was leaked. Here every unreachable
 * block that is not itself a leak counts under exactly one leak: the one
 * that reaches it in the fewest pointers, the lowest-addressed among equally
 * near ones. A list or tree counts under its root as before; a block below
 * two roots counts under one; the members of a cycle of roots reference
 * none of each other (each is a leak of its own) and share what hangs below
 * the cycle by distance. So the leaks plus their referenced blocks are the
 * unreachable blocks, each once.
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
 * dominating SCC to *leaks (ur_big_calloc'd, node order, index = node id);
 * node order is the order of nearness ties.
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
