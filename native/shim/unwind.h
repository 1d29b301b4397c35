/*
 * Allocation-site backtraces through code without frame pointers (Debian's
 * libc and libstdc++), using libunwind's cached DWARF fast path.
 */
#ifndef UR_UNWIND_H
#define UR_UNWIND_H

#include <stddef.h>
#include <stdint.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "state.h"

void ur_unwind_init(void);

/* Fill out[0..max) with return addresses, frame 0 being the return address
 * into the code that called the allocator. Never allocates; callers run it
 * with ur_tls.busy set: a nested call (a signal handler's) takes no backtrace. */
size_t ur_unwind(uintptr_t *out, size_t max);

/* ur_unwind inlined into its caller: one frame fewer to unwind and skip. */
static inline __attribute__((always_inline)) size_t ur_unwind_here(uintptr_t *out, size_t max) {
  void *buf[UR_MAX_FRAMES + 16];
  int want = (int)(max + 16 < UR_MAX_FRAMES + 16 ? max + 16 : UR_MAX_FRAMES + 16);
  int n = unw_backtrace(buf, want);
  int skip = 0;
  while (skip < n && (uintptr_t)buf[skip] >= ur_g.text_lo && (uintptr_t)buf[skip] < ur_g.text_hi)
    skip++;
  size_t k = 0;
  for (int i = skip; i < n && k < max; i++) out[k++] = (uintptr_t)buf[i];
  return k;
}

#endif
