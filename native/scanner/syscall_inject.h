/*
 * A system call run in a stopped thread of a target without the shim,
 * from a syscall instruction of its own code, its registers and signal mask
 * put back as the kernel would have resumed it (the stopper's clone and
 * wait4, the query of each thread's alternate signal stack). One thread's
 * call at a time (ur_inject_syscall), or the same call in many threads at
 * once, in steps: begin each, resume each, wait for each, end each.
 */
#ifndef UR_SYSCALL_INJECT_H
#define UR_SYSCALL_INJECT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "thread_capture.h"

#define UR_INJECT_STEP_NS 2000000000ull

/* The registers a stopped thread resumes with: an interrupted call is
 * restarted as the kernel would (see syscall_inject.c). */
struct user_regs_struct ur_as_resumed(struct user_regs_struct r);

/* One injected call: what its thread gets back. */
struct ur_injection {
  struct ur_thread *t;
  struct user_regs_struct saved;
  uint64_t oldmask;
  int fail;   /* -errno of the injection (-ESRCH: the thread is gone) */
  int stops;  /* syscall stops seen: 1 inside the call, 2 back from it */
  bool placed; /* the thread holds the call's registers and mask */
};

/* Save t's registers and mask and put nr(a...) in place, from the syscall
 * instruction at ip, every signal blocked; clones: report a clone's child.
 * The thread stays stopped. j->fail on failure. */
void ur_inject_begin(struct ur_injection *j, struct ur_thread *t, uint64_t ip, long nr,
                     const uint64_t a[5], bool clones);
/* Let the thread run to its next syscall stop (nothing once failed or back). */
void ur_inject_resume(struct ur_injection *j);
/* Wait, after ur_inject_resume, until the thread has made `stops` syscall
 * stops, letting it on past any other; a clone's child goes to *born. A
 * thread stuck more than UR_INJECT_STEP_NS is interrupted (-ETIMEDOUT). */
void ur_inject_wait(struct ur_injection *j, int stops, pid_t *born);
/* The call's result (-errno from the call itself) once back from it, and
 * the thread's own registers and mask put back. Never between the two
 * stops: the kernel would run the registers put back as a call. */
long ur_inject_end(struct ur_injection *j);

/* Run nr(a...) in the stopped thread t from the syscall instruction at ip,
 * every signal blocked, and put its registers and mask back. Returns the
 * call's result (-errno from the call itself), or sets *fail to the -errno of
 * the injection (-ESRCH: the thread is gone, t->attached cleared). hold(step)
 * is called with the injected registers in place (tests' fault point; may be
 * NULL). A clone's child, reported by PTRACE_EVENT_CLONE, goes to *born. */
long ur_inject_syscall(struct ur_thread *t, uint64_t ip, long nr, const uint64_t a[5],
                       void (*hold)(const char *step), const char *step, pid_t *born, int *fail);

#endif
