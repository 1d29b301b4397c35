/*
 * The scanner's side of the in-child sweep (abi.h struct ur_child_box): start
 * the frozen snapshot child sweeping itself, hand it requests, read replies.
 *
 * Whatever fails, the child ends stopped or dead, never running free: on a
 * timeout it is interrupted (PTRACE_INTERRUPT), so its memory can still be
 * swept from outside; PTRACE_O_EXITKILL (set before it may run) kills it if
 * the scanner dies. All calls must come from the tracer thread.
 */
#ifndef UR_SCANNER_CHILD_SWEEP_H
#define UR_SCANNER_CHILD_SWEEP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "unreachable/abi.h"

struct ur_child {
  pid_t pid;
  int fd;            /* /proc/PID/mem, read-write */
  uint64_t box_addr;
  struct ur_child_box box; /* as last read */
  int running;       /* resumed by us, stop not yet seen */
  int at_own_stop;   /* stopped in the delivery of its own SIGSTOP, its step done */
};

/* At the child's birth stop: EXITKILL, then the go word, then resume it.
 * Returns 0 or -errno (err set); on failure the child is still frozen. */
int ur_child_start(struct ur_child *c, pid_t pid, uint64_t box_addr, char *err, size_t errlen);

/*
 * Wait until the child has finished its step (its own SIGSTOP with a state
 * other than BUSY), at most timeout_ns. Returns 0 with c->box read, or
 * -errno: -ETIMEDOUT (the child was interrupted and is frozen), -ESRCH (it
 * died), -EIO (it reported a failure: -c->box.error says why).
 */
int ur_child_wait(struct ur_child *c, uint64_t timeout_ns, char *err, size_t errlen);

/* Write a request into the inbox and resume the child. Returns 0 or -errno. */
int ur_child_send(struct ur_child *c, uint32_t request, const void *payload, size_t len,
                  char *err, size_t errlen);

/* Read the reply of the last step (c->box.out, out_len) into buf. */
int ur_child_read_reply(struct ur_child *c, void *buf, size_t len);

void ur_child_forget(struct ur_child *c);

/*
 * End a child stopped at its own SIGSTOP (a step done): detached with SIGKILL
 * in place of that signal, it dies untraced, and its parent, the target's
 * helper, reaps it. The scanner does not wait for its exit, where the kernel
 * unmaps the heap's copy-on-write page tables (tens of ms for a gigabyte).
 * Returns 0, or -errno with the child still traced (ur_snapshot_close then).
 */
int ur_child_kill_detached(struct ur_child *c);

#endif
