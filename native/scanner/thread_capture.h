/*
 * ThreadCapture: stop every thread of a process with PTRACE_SEIZE +
 * PTRACE_INTERRUPT (no signal is injected, so a scanner that dies leaves no
 * stray SIGSTOP behind), read their registers, and detach.
 *
 * ptrace binds a tracee to the tracer *thread*: every call on a capture must
 * come from the thread that ran ur_capture_stop.
 */
#ifndef UR_SCANNER_THREAD_CAPTURE_H
#define UR_SCANNER_THREAD_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

struct ur_thread {
  pid_t tid;
  bool attached;        /* seized and not yet detached */
  bool running;         /* attached but resumed by us (the snapshot helper) */
  bool group_stop;      /* was in a group-stop (the user's SIGSTOP) */
  int resume_sig;       /* signal caught in a signal-delivery-stop: re-injected at detach */
  struct user_regs_struct regs;
  uint8_t *xstate;
  size_t xstate_len;
};

struct ur_capture {
  pid_t pid;
  struct ur_thread *threads;
  size_t n, cap;
  bool group_stopped;   /* some thread was in group-stop when captured */
  pid_t *dying;         /* died while traced by us, exit not yet reaped */
  size_t ndying, dying_cap;
  uint64_t t_first_seize_ns;
  /* Where a stop's time goes: the last interrupt of the first pass sent,
   * the first and the last thread seen stopped, the registers read. */
  uint64_t t_interrupted_ns, t_first_stop_ns, t_last_stop_ns, t_regs_ns;
  char err[256];
};

/* CLOCK_MONOTONIC in ns. */
uint64_t ur_now_ns(void);

/*
 * Stop all threads of pid and read their registers. Returns 0, or -errno with
 * c->err set and nothing left attached:
 *   -ESRCH  the process does not exist (or died during capture)
 *   -EPERM  no permission, or already traced (err names the tracer)
 *   -EINVAL pid is the calling process
 */
int ur_capture_stop(struct ur_capture *c, pid_t pid);

/* Detach every attached thread, re-injecting saved signals; threads that
 * were group-stopped re-enter the group-stop. Threads that died while traced
 * are reaped (waiting up to 2 s for a dying group to finish), so none stays
 * traced by this process. Idempotent. Returns the number of threads that
 * could not be detached cleanly (they vanished). */
int ur_capture_release(struct ur_capture *c);

/* Free memory (call after release). */
void ur_capture_free(struct ur_capture *c);

struct ur_thread *ur_capture_find(struct ur_capture *c, pid_t tid);

/*
 * Wait for a ptrace stop of tid for at most timeout_ns (WNOHANG polling, so
 * a hung tracee cannot hang the scanner). Returns 1 with *status set, 0 on
 * timeout, -errno on error (-ECHILD: no such tracee).
 */
int ur_wait_stop(pid_t tid, int *status, uint64_t timeout_ns);
/* The same, its sleeps between two looks growing up to poll_max_ns: for a
 * wait of seconds (a snapshot child's sweep), where looking every 0.2 ms
 * would cost the scanner, and so the target beside it, a core's twentieth. */
int ur_wait_stop_every(pid_t tid, int *status, uint64_t timeout_ns, uint64_t poll_max_ns);

/* Stop one thread (PTRACE_SEIZE + PTRACE_INTERRUPT) and detach at once: a
 * futex wait it sleeps in is restarted and compares its words again. The
 * rest of the process runs on. A signal caught meanwhile is handed back.
 * Returns 0 or -errno (-ETIMEDOUT: it did not stop within a second). */
int ur_nudge_thread(pid_t pid, pid_t tid);

/* Let the threads inside [lo, hi) (a function's code: malloc's) run alone,
 * the others staying stopped, and stop them again a moment later, until none
 * is inside or after `rounds` rounds. Inside: the pc there, or the word on
 * top of the stack a return address there. Threads are only continued and
 * interrupted, never single-stepped: a tracer that dies leaves them running
 * as they were (a trap flag left set would kill them). A thread that takes
 * a signal keeps it for the detach and is not run again. Registers are read
 * again. Returns the number of threads left inside, or -errno. */
int ur_capture_run_out(struct ur_capture *c, uint64_t lo, uint64_t hi, unsigned rounds);

/* Read one thread's registers into t. Returns 0 or -errno. */
int ur_read_regs(struct ur_thread *t);

#endif
