#include "sweep_core.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "leak_folding.h"
#include "radix_sort.h"

static int is_excluded(const uint64_t *sorted, size_t n, uint64_t addr) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] < addr) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && sorted[lo] == addr;
}

int ur_sweep_run(struct ur_walker *w, const struct ur_sweep_in *in, int want_indices,
                 uint64_t (*now)(void), struct ur_sweep_out *out) {
  memset(out, 0, sizeof(*out));
  uint32_t *unreachable = NULL;
  struct ur_leak *leaks = NULL;
  size_t nunreachable = 0, nleaks = 0;
  uint64_t *excl = NULL;
  int rc;
  uint64_t t0 = now();
  if (in->threads > 1)
    rc = ur_walker_mark_team(w, in->mems, in->threads, in->team, in->ranges, in->nranges,
                             in->values, in->nvalues);
  else
    rc = ur_walker_mark(w, in->ranges, in->nranges, in->values, in->nvalues);
  out->bytes_scanned = w->bytes_scanned;
  uint64_t t1 = now();
  out->mark_ns = t1 - t0;
  if (rc) goto out;
  if ((rc = ur_fold_leaks(w, &unreachable, &nunreachable, &leaks, &nleaks)) != 0) goto out;
  rc = -ENOMEM;
  size_t nex = in->nexcluded;
  excl = ur_big_calloc(nex ? nex : 1, sizeof(*excl));
  if (!excl) goto out;
  memcpy(excl, in->excluded, nex * sizeof(*excl));
  if (ur_radix_sort(excl, NULL, nex) < 0) goto out;
  const uint64_t *allocs = w->allocs;
  for (size_t i = 0; i < nunreachable; i++) {
    uint64_t b = allocs[2 * (size_t)unreachable[i]];
    if (nex && is_excluded(excl, nex, b)) continue;
    out->unreachable_count++;
    out->unreachable_bytes += allocs[2 * (size_t)unreachable[i] + 1];
  }
  out->leaks = ur_big_calloc(nleaks ? nleaks : 1, sizeof(*out->leaks));
  if (!out->leaks) goto out;
  size_t k = 0;
  for (size_t i = 0; i < nleaks; i++) {
    size_t idx = leaks[i].index;
    uint64_t b = allocs[2 * idx];
    if (nex && is_excluded(excl, nex, b)) continue;
    out->leaks[k++] = (struct ur_leak_record){
        .begin = b,
        .size = allocs[2 * idx + 1],
        .referenced_count = leaks[i].referenced_count,
        .referenced_size = leaks[i].referenced_size,
        .stack_id = in->stack_ids ? in->stack_ids[idx] : 0,
    };
  }
  out->nleaks = k;
  if (want_indices) {
    out->unreachable = unreachable;
    out->nunreachable = nunreachable;
    unreachable = NULL;
  }
  rc = 0;
out:
  out->fold_ns = now() - t1;
  ur_big_free(unreachable);
  ur_big_free(leaks);
  ur_big_free(excl);
  if (rc) ur_sweep_out_free(out);
  return rc;
}

void ur_sweep_out_free(struct ur_sweep_out *out) {
  ur_big_free(out->leaks);
  ur_big_free(out->unreachable);
  out->leaks = NULL;
  out->unreachable = NULL;
  out->nleaks = out->nunreachable = 0;
}
