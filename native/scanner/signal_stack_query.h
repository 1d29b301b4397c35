/*
 * Each stopped thread's alternate signal stack, asked of the kernel: the
 * only holder of a stack a program malloc'ed, installed with sigaltstack()
 * and dropped (/proc does not show it). Without the shim nothing recorded
 * it, so each thread runs sigaltstack(NULL, &old) injected from a syscall
 * instruction of the target's code, `old` in the dead stack below the red
 * zone, whose bytes are read first and written back after. All threads
 * run their calls side by side: the stop grows by the ptrace calls each
 * needs, not by each one's trips to the call and back in turn.
 */
#ifndef UR_SIGNAL_STACK_QUERY_H
#define UR_SIGNAL_STACK_QUERY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "thread_capture.h"

struct ur_signal_stack {
  int32_t tid, pad;
  uint64_t sp, size; /* an enabled stack only */
};

/* Ask every thread of c (all stopped) from the syscall instruction at ip.
 * out holds c->n entries; *nout is set to those with a stack. Returns how
 * many threads could not be asked, with the first reason in why (a thread
 * taking a signal or in a group stop, a seccomp filter that does not
 * provably allow the call, a stack that cannot be read). A thread that
 * exits meanwhile is left out. hold("sigaltstack") is called with every
 * thread asked inside its call (tests' fault point; may be NULL). */
size_t ur_query_signal_stacks(struct ur_capture *c, uint64_t ip, void (*hold)(const char *step),
                              struct ur_signal_stack *out, size_t *nout, char *why,
                              size_t why_len);

#endif
