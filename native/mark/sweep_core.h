/*
 * One sweep, the same code in both places it runs: mark from the roots
 * (heap_walker), fold the unreachable blocks (leak_folding), and boil the
 * result down to what the report needs: totals and one compact record per
 * reported leak. The scanner runs it over /proc/PID/mem (native/scanner/
 * sweep.c, "stopped" mode and the fallback); the forked snapshot child runs it
 * over its own memory (native/shim/child.c), so no heap byte is copied.
 */
#ifndef UR_MARK_SWEEP_CORE_H
#define UR_MARK_SWEEP_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "heap_walker.h"
#include "unreachable/abi.h" /* struct ur_leak_record */

struct ur_sweep_in {
  const uint64_t *ranges;   /* root (begin, end) pairs */
  size_t nranges;
  const uint64_t *values;   /* root words (registers) */
  size_t nvalues;
  const uint64_t *excluded; /* block addresses never counted nor reported (in-flight) */
  size_t nexcluded;
  const uint32_t *stack_ids;/* per caller index, or NULL */
  /* Marking threads beyond the caller (ur_walker_mark_team): none when
   * threads <= 1; else mems[k] is thread k's reader, mems[0] the walker's. */
  unsigned threads;
  struct ur_mem *const *mems;
  const struct ur_team_ops *team;
};

struct ur_sweep_out {
  uint64_t unreachable_count; /* every unreachable block, excluded ones left out */
  uint64_t unreachable_bytes;
  uint64_t bytes_scanned;
  uint64_t mark_ns, fold_ns;
  struct ur_leak_record *leaks; /* ur_big_calloc'd, address order, excluded left out */
  size_t nleaks;
  uint32_t *unreachable;      /* caller indices of all unreachable blocks (if want_indices) */
  size_t nunreachable;
};

/* w: initialised over the caller's allocations. now: a monotonic clock in
 * ns. Returns 0 or -ENOMEM; out's arrays are freed with ur_sweep_out_free. */
int ur_sweep_run(struct ur_walker *w, const struct ur_sweep_in *in, int want_indices,
                 uint64_t (*now)(void), struct ur_sweep_out *out);
void ur_sweep_out_free(struct ur_sweep_out *out);

#endif
