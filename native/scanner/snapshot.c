#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "unreachable/abi.h"

#define STEP_TIMEOUT_NS (2000000000ull)
#define RESTOP_TIMEOUT_NS (1000000000ull)

static int fmt_err(int rc, char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return rc;
}

static int rw_cmd(int fd, uint64_t addr, uint32_t *v, int write) {
  ssize_t r = write ? pwrite(fd, v, sizeof(*v), (off_t)addr) : pread(fd, v, sizeof(*v), (off_t)addr);
  if (r == (ssize_t)sizeof(*v)) return 0;
  return r < 0 ? -errno : -EIO;
}

static void nap(uint64_t *backoff) {
  struct timespec ts = {0, (long)*backoff};
  nanosleep(&ts, NULL);
  if (*backoff < 500000) *backoff *= 2;
}

int ur_snapshot_close(pid_t child) {
  if (child <= 0) return 0;
  if (kill(child, SIGKILL) < 0 && errno == ESRCH) return 0;
  uint64_t deadline = ur_now_ns() + STEP_TIMEOUT_NS;
  for (;;) {
    int status;
    uint64_t now = ur_now_ns();
    int r = ur_wait_stop(child, &status, now < deadline ? deadline - now : 0);
    if (r < 0) return r == -ECHILD ? 0 : r;
    if (r == 0) return -ETIMEDOUT;
    if (WIFEXITED(status) || WIFSIGNALED(status)) return 0;
    /* A stop racing with the kill: let it run into the SIGKILL. */
    ptrace(PTRACE_CONT, child, NULL, NULL);
  }
}

/* The helper was stopped while finishing a previous snapshot (between its
 * wait4 and storing IDLE, e.g. right after a previous close()): let it run
 * alone until the word is back to IDLE, then stop it again. */
static int finish_previous(struct ur_thread *t, int fd, uint64_t cmd_addr) {
  /* A pending signal from the capture is requeued (blocked) by the kernel. */
  if (ptrace(PTRACE_CONT, t->tid, NULL, (void *)(long)t->resume_sig) < 0) return -errno;
  t->resume_sig = 0;
  uint64_t deadline = ur_now_ns() + STEP_TIMEOUT_NS, backoff = 2000;
  uint32_t cur = UR_CMD_SNAPSHOT;
  int rc = -EBUSY;
  while (ur_now_ns() < deadline) {
    if (rw_cmd(fd, cmd_addr, &cur, 0) == 0 && cur == UR_CMD_IDLE) {
      rc = 0;
      break;
    }
    /* In a process stopped by SIGSTOP the helper traps again into its
     * group stop as it runs: on again, until it is done. */
    int status;
    pid_t r = waitpid(t->tid, &status, __WALL | WNOHANG);
    if (r == t->tid && (WIFEXITED(status) || WIFSIGNALED(status))) {
      t->attached = false;
      return -ESRCH;
    }
    if (r == t->tid) {
      if ((status >> 16) == 0 && !t->resume_sig) t->resume_sig = WSTOPSIG(status);
      ptrace(PTRACE_CONT, t->tid, NULL, NULL);
      continue;
    }
    nap(&backoff);
  }
  ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL);
  for (;;) {
    int status;
    if (ur_wait_stop(t->tid, &status, STEP_TIMEOUT_NS) != 1) {
      t->running = true; /* release() retries */
      return -ETIMEDOUT;
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      t->attached = false;
      return -ESRCH;
    }
    if ((status >> 16) == PTRACE_EVENT_STOP) break;
    /* A signal-delivery-stop (only SIGSTOP can get through the mask): keep it. */
    if ((status >> 16) == 0 && !t->resume_sig) t->resume_sig = WSTOPSIG(status);
    ptrace(PTRACE_CONT, t->tid, NULL, NULL);
  }
  return rc;
}

char ur_thread_state(pid_t pid, pid_t tid) {
  char path[96], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* comm may contain spaces and parens */
  return (p && p[1] == ' ') ? p[2] : 0;
}

int ur_snapshot_reap(pid_t pid, pid_t tid, uint64_t cmd_addr) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return -errno;
  uint32_t cmd = UR_CMD_IDLE;
  int rc = rw_cmd(fd, cmd_addr, &cmd, 0);
  /* 'T': in its group stop, not traced by anyone. */
  if (rc < 0 || cmd == UR_CMD_IDLE || ur_thread_state(pid, tid) != 'T') goto out;
  if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
    rc = -errno;
    goto out;
  }
  struct ur_thread t = {.tid = tid, .attached = true};
  int status;
  ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
  if (ur_wait_stop(tid, &status, STEP_TIMEOUT_NS) != 1) {
    ptrace(PTRACE_DETACH, tid, NULL, NULL);
    rc = -ETIMEDOUT;
    goto out;
  }
  if (WIFEXITED(status) || WIFSIGNALED(status)) {
    rc = -ESRCH;
    goto out;
  }
  if ((status >> 16) == 0) t.resume_sig = WSTOPSIG(status);
  uint64_t oldmask = 0, allmask = ~UINT64_C(0);
  ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(oldmask), &oldmask);
  ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(allmask), &allmask);
  rc = finish_previous(&t, fd, cmd_addr);
  if (t.attached && t.running) { /* timed out running: stop it to let it go */
    ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
    t.running = ur_wait_stop(tid, &status, RESTOP_TIMEOUT_NS) != 1;
  }
  if (t.attached && !t.running) {
    ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(oldmask), &oldmask);
    ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)t.resume_sig);
  }
out:
  close(fd);
  return rc;
}

pid_t ur_snapshot_take(struct ur_capture *c, pid_t helper_tid, uint64_t cmd_addr, char *err,
                       size_t errlen) {
  struct ur_thread *t = ur_capture_find(c, helper_tid);
  if (!t || !t->attached || t->running)
    return fmt_err(-EINVAL, err, errlen, "helper thread %d is not a stopped thread of process %d",
                   (int)helper_tid, (int)c->pid);
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/mem", (int)c->pid);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return fmt_err(-errno, err, errlen, "open %s: %s", path, strerror(errno));

  pid_t tid = helper_tid;
  int rc;
  uint32_t cmd;
  if ((rc = rw_cmd(fd, cmd_addr, &cmd, 0)) < 0) {
    close(fd);
    return fmt_err(rc, err, errlen, "cannot read the helper command word at %#llx: %s",
                   (unsigned long long)cmd_addr, strerror(-rc));
  }
  /* Block every signal in the helper while it runs alone: a signal for the
   * process would otherwise be taken (and its handler run) while the rest is
   * stopped, or get lost in our wait loop. */
  uint64_t oldmask = 0, allmask = ~UINT64_C(0);
  if (ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(oldmask), &oldmask) < 0 ||
      ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(allmask), &allmask) < 0) {
    rc = -errno;
    close(fd);
    return fmt_err(rc, err, errlen, "PTRACE_SETSIGMASK on helper %d: %s", (int)tid,
                   strerror(-rc));
  }
  if (cmd != UR_CMD_IDLE && (rc = finish_previous(t, fd, cmd_addr)) < 0) {
    fmt_err(rc, err, errlen, "helper is busy (command word %u)", cmd);
    goto restore;
  }
  long opts = PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK;
  uint32_t go = UR_CMD_SNAPSHOT;
  if (ptrace(PTRACE_SETOPTIONS, tid, NULL, (void *)opts) < 0) {
    rc = fmt_err(-errno, err, errlen, "PTRACE_SETOPTIONS on helper %d: %s", (int)tid,
                 strerror(errno));
    goto restore;
  }
  if ((rc = rw_cmd(fd, cmd_addr, &go, 1)) < 0) {
    fmt_err(rc, err, errlen, "cannot write the helper command word: %s", strerror(-rc));
    goto restore;
  }
  /* A signal caught in a signal-delivery-stop is handed back now: being
   * blocked, the kernel requeues it (siginfo intact) until the mask is
   * restored. The helper's interrupted futex wait restarts, sees the word
   * changed and proceeds to clone. */
  if (ptrace(PTRACE_CONT, tid, NULL, (void *)(long)t->resume_sig) < 0) {
    rc = fmt_err(-errno, err, errlen, "PTRACE_CONT helper %d: %s", (int)tid, strerror(errno));
    uint32_t idle = UR_CMD_IDLE;
    rw_cmd(fd, cmd_addr, &idle, 1);
    goto restore;
  }
  t->resume_sig = 0;
  t->running = true;

  int late_sig = 0, interrupted = 0;
  pid_t child = 0;
  uint64_t deadline = ur_now_ns() + STEP_TIMEOUT_NS, backoff = 2000;
  rc = 0;
  for (;;) {
    int status;
    pid_t r = waitpid(tid, &status, __WALL | WNOHANG);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (r == tid && (WIFEXITED(status) || WIFSIGNALED(status)))) {
      t->attached = t->running = false;
      /* Gone (it steps aside for unshare/setns): the next helper must not
       * find the command and fork a child nobody waits for. */
      uint32_t idle = UR_CMD_IDLE;
      rw_cmd(fd, cmd_addr, &idle, 1);
      close(fd);
      return fmt_err(-ESRCH, err, errlen, "helper thread %d exited during the snapshot",
                     (int)tid);
    }
    if (r == tid) {
      int event = status >> 16;
      if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK ||
          event == PTRACE_EVENT_VFORK) {
        unsigned long msg = 0;
        ptrace(PTRACE_GETEVENTMSG, tid, NULL, &msg);
        child = (pid_t)msg;
        break;
      }
      if (event == PTRACE_EVENT_STOP && interrupted) break; /* stopped again: give up */
      if (event == 0) late_sig = WSTOPSIG(status); /* SIGSTOP/SIGKILL cannot be blocked */
      ptrace(PTRACE_CONT, tid, NULL, NULL);
      continue;
    }
    uint64_t now = ur_now_ns();
    if (!interrupted) {
      /* Back to IDLE without a clone event: the clone failed in the helper
       * (seccomp, EAGAIN): stop waiting. */
      uint32_t cur = UR_CMD_SNAPSHOT;
      int idle = rw_cmd(fd, cmd_addr, &cur, 0) == 0 && cur == UR_CMD_IDLE;
      if (idle || now >= deadline) {
        rc = idle ? fmt_err(-ECHILD, err, errlen, "the helper's clone failed (seccomp filter?)")
                  : fmt_err(-ETIMEDOUT, err, errlen,
                            "helper thread %d did not clone within %llu ms", (int)tid,
                            STEP_TIMEOUT_NS / 1000000);
        ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
        interrupted = 1;
        deadline = now + RESTOP_TIMEOUT_NS;
      }
    } else if (now >= deadline) {
      /* Running and unstoppable (D state?): leave it to release(). */
      close(fd);
      if (!rc) rc = -ETIMEDOUT;
      return rc;
    }
    nap(&backoff);
  }

  if (!child) {
    /* Undo: the helper is stopped again; take the command back if unread. */
    t->running = false;
    t->resume_sig = late_sig;
    uint32_t cur;
    if (rw_cmd(fd, cmd_addr, &cur, 0) == 0 && cur == UR_CMD_SNAPSHOT) {
      cur = UR_CMD_IDLE;
      rw_cmd(fd, cmd_addr, &cur, 1);
    }
    if (!rc) rc = fmt_err(-EIO, err, errlen, "snapshot failed");
    goto restore;
  }

  /* The child is auto-attached, stopped before its first instruction. */
  int status = 0;
  int w = ur_wait_stop(child, &status, STEP_TIMEOUT_NS);
  if (w != 1 || WIFEXITED(status) || WIFSIGNALED(status)) {
    ur_snapshot_close(child);
    rc = fmt_err(w == 0 ? -ETIMEDOUT : -ECHILD, err, errlen,
                 "snapshot child %d did not reach its initial stop", (int)child);
    child = 0;
  }
  /* Helper: restore and let it go to wait4 the child. An event stop ignores
   * a signal passed to DETACH, so a late signal is re-sent instead. */
  ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(oldmask), &oldmask);
  ptrace(PTRACE_SETOPTIONS, tid, NULL, NULL);
  ptrace(PTRACE_DETACH, tid, NULL, NULL);
  t->attached = t->running = false;
  if (late_sig && late_sig != SIGKILL) syscall(SYS_tgkill, c->pid, tid, late_sig);
  close(fd);
  return child ? child : rc;

restore:
  ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(oldmask), &oldmask);
  ptrace(PTRACE_SETOPTIONS, tid, NULL, NULL);
  close(fd);
  return rc;
}
