/*
 * Whether the process is under a seccomp filter, so that the unwinder's own
 * system calls (libunwind's address checks, its pipe) are not made: see
 * sandbox.c.
 */
#ifndef UR_SANDBOX_H
#define UR_SANDBOX_H

#include "state.h"

extern int ur_sandbox_filtered;

/* Reads whether the process started under a filter (inherited across exec). */
void ur_sandbox_init(void);

/* A call of libunwind's (this thread is unwinding, or starting the unwinder)
 * in a filtered process. */
static inline int ur_unwinder_sandboxed(void) {
  return ur_tls.unwinding && __atomic_load_n(&ur_sandbox_filtered, __ATOMIC_RELAXED);
}

#endif
