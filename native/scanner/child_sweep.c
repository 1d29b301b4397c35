#include "child_sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "thread_capture.h"

#define INTERRUPT_TIMEOUT_NS (2000000000ull)
/* A request's answer is seen at most 1 ms late (a few requests a scan),
 * where looking every 0.2 ms for the seconds a sweep takes woke the scanner
 * 5000 times a second: CPU taken from the target and the child. */
#define CHILD_POLL_MAX_NS (1000000ull)

static int fail(int rc, char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return rc;
}

static int rw(struct ur_child *c, uint64_t addr, void *buf, size_t len, int write) {
  size_t done = 0;
  while (done < len) {
    ssize_t r = write ? pwrite(c->fd, (const char *)buf + done, len - done, (off_t)(addr + done))
                      : pread(c->fd, (char *)buf + done, len - done, (off_t)(addr + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r < 0 ? -errno : -EIO;
    done += (size_t)r;
  }
  return 0;
}

static int write_u32(struct ur_child *c, size_t off, uint32_t v) {
  return rw(c, c->box_addr + off, &v, sizeof(v), 1);
}

int ur_child_start(struct ur_child *c, pid_t pid, uint64_t box_addr, char *err, size_t errlen) {
  memset(c, 0, sizeof(*c));
  c->fd = -1;
  c->pid = pid;
  c->box_addr = box_addr;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
  if ((c->fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
    return fail(-errno, err, errlen, "open %s: %s", path, strerror(errno));
  /* EXITKILL first: from the moment the go word is there, a scanner that dies
   * takes the child with it (without the word an untraced child just exits). */
  if (ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)PTRACE_O_EXITKILL) < 0)
    return fail(-errno, err, errlen, "PTRACE_SETOPTIONS on snapshot child %d: %s", (int)pid,
                strerror(errno));
  int rc;
  if ((rc = write_u32(c, offsetof(struct ur_child_box, state), UR_CHILD_BUSY)) < 0 ||
      (rc = write_u32(c, offsetof(struct ur_child_box, go), UR_CHILD_GO)) < 0)
    return fail(rc, err, errlen, "cannot write the child's box: %s", strerror(-rc));
  if (ptrace(PTRACE_CONT, pid, NULL, NULL) < 0) {
    rc = -errno;
    write_u32(c, offsetof(struct ur_child_box, go), 0);
    return fail(rc, err, errlen, "PTRACE_CONT snapshot child %d: %s", (int)pid, strerror(-rc));
  }
  c->running = 1;
  return 0;
}

/* Stop a child that overran its time; it stays frozen for an outside sweep. */
static int interrupt(struct ur_child *c) {
  if (ptrace(PTRACE_INTERRUPT, c->pid, NULL, NULL) < 0) return -errno;
  for (;;) {
    int status;
    int r = ur_wait_stop(c->pid, &status, INTERRUPT_TIMEOUT_NS);
    if (r <= 0) return r == 0 ? -ETIMEDOUT : r;
    if (WIFEXITED(status) || WIFSIGNALED(status)) return -ESRCH;
    if ((status >> 16) == PTRACE_EVENT_STOP) {
      c->running = 0;
      return 0;
    }
    /* A signal-delivery-stop on the way: drop it, wait for the interrupt. */
    ptrace(PTRACE_CONT, c->pid, NULL, NULL);
  }
}

int ur_child_wait(struct ur_child *c, uint64_t timeout_ns, char *err, size_t errlen) {
  if (!c->running) return fail(-EINVAL, err, errlen, "the snapshot child is not running");
  uint64_t deadline = ur_now_ns() + timeout_ns;
  for (;;) {
    uint64_t now = ur_now_ns();
    int status = 0;
    int r = ur_wait_stop_every(c->pid, &status, now < deadline ? deadline - now : 0,
                               CHILD_POLL_MAX_NS);
    if (r == 0) {
      int ir = interrupt(c);
      return fail(ir == 0 ? -ETIMEDOUT : ir, err, errlen,
                  "the snapshot child did not finish within %llu ms%s",
                  (unsigned long long)(timeout_ns / 1000000),
                  ir == 0 ? " (interrupted)" : " and could not be interrupted");
    }
    if (r < 0 || WIFEXITED(status) || WIFSIGNALED(status)) {
      c->running = 0;
      if (r > 0 && WIFSIGNALED(status))
        return fail(-ESRCH, err, errlen, "the snapshot child was killed by signal %d",
                    WTERMSIG(status));
      return fail(-ESRCH, err, errlen, "the snapshot child exited");
    }
    int sig = WSTOPSIG(status), event = status >> 16;
    if (event == 0 && sig == SIGSTOP) {
      int rc = rw(c, c->box_addr, &c->box, sizeof(c->box), 0);
      if (rc < 0) {
        c->running = 0; /* stopped: usable for an outside sweep */
        return fail(rc, err, errlen, "cannot read the child's box: %s", strerror(-rc));
      }
      if (c->box.state != UR_CHILD_BUSY) {
        c->running = 0;
        c->at_own_stop = 1;
        if (c->box.state == UR_CHILD_FAILED) {
          int e = c->box.error < 0 ? -c->box.error : EIO;
          return fail(-EIO, err, errlen, "the snapshot child failed: %s", strerror(e));
        }
        return 0;
      }
      sig = 0; /* someone else's SIGSTOP (the process group's): suppressed */
    } else if (event != 0) {
      sig = 0; /* a group stop or event: just resume */
    }
    /* Other signals (a fault the child's handler repairs): deliver them. */
    if (ptrace(PTRACE_CONT, c->pid, NULL, (void *)(long)sig) < 0) {
      c->running = 0;
      return fail(-errno, err, errlen, "PTRACE_CONT snapshot child: %s", strerror(errno));
    }
  }
}

int ur_child_send(struct ur_child *c, uint32_t request, const void *payload, size_t len,
                  char *err, size_t errlen) {
  if (c->running) return fail(-EBUSY, err, errlen, "the snapshot child is busy");
  if (len > c->box.in_cap)
    return fail(-E2BIG, err, errlen, "request of %zu bytes exceeds the child's inbox", len);
  int rc;
  uint64_t in_len = len;
  if ((len && (rc = rw(c, c->box.in, (void *)payload, len, 1)) < 0) ||
      (rc = rw(c, c->box_addr + offsetof(struct ur_child_box, in_len), &in_len, 8, 1)) < 0 ||
      (rc = write_u32(c, offsetof(struct ur_child_box, state), UR_CHILD_BUSY)) < 0 ||
      (rc = write_u32(c, offsetof(struct ur_child_box, request), request)) < 0)
    return fail(rc, err, errlen, "cannot write the child's request: %s", strerror(-rc));
  c->at_own_stop = 0;
  if (ptrace(PTRACE_CONT, c->pid, NULL, NULL) < 0)
    return fail(-errno, err, errlen, "PTRACE_CONT snapshot child: %s", strerror(errno));
  c->running = 1;
  return 0;
}

int ur_child_read_reply(struct ur_child *c, void *buf, size_t len) {
  if (len > c->box.out_len) return -EINVAL;
  return len ? rw(c, c->box.out, buf, len, 0) : 0;
}

int ur_child_kill_detached(struct ur_child *c) {
  /* Only a signal-delivery-stop takes the signal PTRACE_DETACH names: from
   * any other stop (an interrupt's, an event's) the child would run free. */
  if (c->pid <= 0 || c->running || !c->at_own_stop) return -EINVAL;
  if (ptrace(PTRACE_DETACH, c->pid, NULL, (void *)(long)SIGKILL) < 0) return -errno;
  c->at_own_stop = 0;
  return 0;
}

void ur_child_forget(struct ur_child *c) {
  if (c->fd >= 0) close(c->fd);
  memset(c, 0, sizeof(*c));
  c->fd = -1;
}
