/*
 * One system call run in a stopped thread of a target without the shim,
 * from a syscall instruction of its own code, its registers and signal mask
 * put back as the kernel would have resumed it (the stopper's clone and
 * wait4, the query of each thread's alternate signal stack).
 */
#ifndef UR_SYSCALL_INJECT_H
#define UR_SYSCALL_INJECT_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "thread_capture.h"

#define UR_INJECT_STEP_NS 2000000000ull

/* The registers a stopped thread resumes with: an interrupted call is
 * restarted as the kernel would (see syscall_inject.c). */
struct user_regs_struct ur_as_resumed(struct user_regs_struct r);

/* Run nr(a...) in the stopped thread t from the syscall instruction at ip,
 * every signal blocked, and put its registers and mask back. Returns the
 * call's result (-errno from the call itself), or sets *fail to the -errno of
 * the injection (-ESRCH: the thread is gone, t->attached cleared). hold(step)
 * is called with the injected registers in place (tests' fault point; may be
 * NULL). A clone's child, reported by PTRACE_EVENT_CLONE, goes to *born. */
long ur_inject_syscall(struct ur_thread *t, uint64_t ip, long nr, const uint64_t a[5],
                       void (*hold)(const char *step), const char *step, pid_t *born, int *fail);

#endif
