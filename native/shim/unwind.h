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

/*
 * libunwind keeps process-wide locks on its slow path. fork() copies them as
 * they are, so a child forked while another thread was inside libunwind would
 * wait forever on its first backtrace. A forking thread closes this gate and
 * waits for the threads inside to leave (ur_unwind_gate_close, from the fork
 * handlers); threads arriving meanwhile wait for it to open again.
 */
void ur_unwind_wait_gate(void);
void ur_unwind_wake_gate(void);
void ur_unwind_gate_close(uint32_t tid);
void ur_unwind_gate_open(uint32_t tid);
void ur_unwind_gate_after_fork_child(void);

static inline void ur_unwind_enter(void) {
  ur_tls.unwinding++;
  __atomic_fetch_add(&ur_g.unwinders, 1, __ATOMIC_SEQ_CST);
  if (UR_UNLIKELY(__atomic_load_n(&ur_fork->unwind_gate, __ATOMIC_SEQ_CST))) ur_unwind_wait_gate();
}

static inline void ur_unwind_leave(void) {
  __atomic_fetch_sub(&ur_g.unwinders, 1, __ATOMIC_SEQ_CST);
  ur_tls.unwinding--;
  if (UR_UNLIKELY(__atomic_load_n(&ur_fork->unwind_gate, __ATOMIC_SEQ_CST))) ur_unwind_wake_gate();
}

/* ur_unwind inlined into its caller: one frame fewer to unwind and skip. */
static inline __attribute__((always_inline)) size_t ur_unwind_here(uintptr_t *out, size_t max) {
  void *buf[UR_MAX_FRAMES + 16];
  int want = (int)(max + 16 < UR_MAX_FRAMES + 16 ? max + 16 : UR_MAX_FRAMES + 16);
  ur_unwind_enter();
  int n = unw_backtrace(buf, want);
  ur_unwind_leave();
  int skip = 0;
  while (skip < n && (uintptr_t)buf[skip] >= ur_g.text_lo && (uintptr_t)buf[skip] < ur_g.text_hi)
    skip++;
  size_t k = 0;
  for (int i = skip; i < n && k < max; i++) out[k++] = (uintptr_t)buf[i];
  return k;
}

#endif
