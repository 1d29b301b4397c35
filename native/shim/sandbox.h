/*
 * Whether the process is under a seccomp filter, so that the unwinder's own
 * system calls (libunwind's address checks, its pipe) are not made: see
 * sandbox.c.
 */
#ifndef UR_SANDBOX_H
#define UR_SANDBOX_H

#include "state.h"

extern int ur_sandbox_filtered;

/* The program installed a filter in this process (or in its parent before
 * the fork): an allowlist of its own calls, as a rule, which names none of
 * the calls starting a thread makes. No helper is started under it. */
extern int ur_sandbox_own_filter;

/* The helper thread is under a filter (one it inherited from the thread
 * that started it, or one the program put on every thread with
 * SECCOMP_FILTER_FLAG_TSYNC): it makes only the calls every allowlist
 * grants a threaded program (futex), helper.c. */
extern int ur_sandbox_helper_confined;

/* fn is called by syscall() before it installs a filter on every thread
 * (helper.c: the helper, woken, sees it is confined before its next call). */
void ur_sandbox_on_confine(void (*fn)(void));

/* Called on the thread that starts the helper, before it does. */
void ur_sandbox_helper_starting(void);

static inline int ur_helper_confined(void) {
  return __atomic_load_n(&ur_sandbox_helper_confined, __ATOMIC_RELAXED);
}

/* Reads whether the process started under a filter (inherited across exec). */
void ur_sandbox_init(void);

/* A call of libunwind's (this thread is unwinding, or starting the unwinder)
 * in a filtered process. */
static inline int ur_unwinder_sandboxed(void) {
  return ur_tls.unwinding && __atomic_load_n(&ur_sandbox_filtered, __ATOMIC_RELAXED);
}

#endif
