#include "thread_capture.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif

/* XSAVE area: 2.7 KiB with AVX-512, ~11 KiB with AMX; the kernel returns the
 * real length in iov_len. */
#define XSTATE_MAX 16384
#define STOP_TIMEOUT_NS (10ull * 1000 * 1000 * 1000)

uint64_t ur_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

static char task_state(pid_t pid, pid_t tid);

/* The longest sleep between two looks: a stop is seen at most this late
 * (every thread of the pause waits for the last one). */
#define WAIT_POLL_MAX_NS 200000ull

int ur_wait_stop(pid_t tid, int *status, uint64_t timeout_ns) {
  return ur_wait_stop_every(tid, status, timeout_ns, WAIT_POLL_MAX_NS);
}

int ur_wait_stop_every(pid_t tid, int *status, uint64_t timeout_ns, uint64_t poll_max_ns) {
  uint64_t start = ur_now_ns(), deadline = start + timeout_ns;
  uint64_t backoff = 2000;
  for (;;) {
    pid_t r = waitpid(tid, status, __WALL | WNOHANG);
    if (r == tid) return 1;
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    uint64_t now = ur_now_ns();
    if (now >= deadline) return 0;
    /* A thread of a process being killed can turn zombie without ever
     * reporting a stop: after the first few milliseconds, look. */
    if (now - start >= 2000000ull) {
      char st = task_state(tid, tid);
      if (st == 'Z' || st == 'X' || st == 0) {
        /* It may have died since the waitpid above and be ours to reap: a
         * traced zombie left unreaped keeps its real parent waiting. */
        if (waitpid(tid, status, __WALL | WNOHANG) == tid) return 1;
        return -ESRCH;
      }
    }
    sleep_ns(backoff);
    if (backoff < poll_max_ns) backoff *= 2;
  }
}

/* Whether tid is a thread of pid (/proc/PID/task lists only its own). */
static int thread_of(pid_t pid, pid_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task/%d", (int)pid, (int)tid);
  return access(path, F_OK) == 0;
}

int ur_nudge_thread(pid_t pid, pid_t tid) {
  /* tid is the target's word: another process's thread is never stopped.
   * Checked again once seized, when the tid can no longer be reused. */
  if (!thread_of(pid, tid)) return -ESRCH;
  if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) return -errno;
  if (!thread_of(pid, tid)) {
    ptrace(PTRACE_DETACH, tid, NULL, NULL);
    return -ESRCH;
  }
  int status = 0, sig = 0, rc = -ESRCH;
  if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) == 0) rc = ur_wait_stop(tid, &status, 1000000000ull);
  if (rc == 1) {
    if (WIFEXITED(status) || WIFSIGNALED(status)) return -ESRCH;
    if ((status >> 16) == 0) sig = WSTOPSIG(status); /* a signal-delivery-stop */
  }
  /* Not stopped (rc != 1): a seized thread that never stopped may be
   * detached as it is; the kernel detaches it at our exit anyway. */
  if (ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)sig) < 0 && rc == 1) return -errno;
  return rc == 1 ? 0 : rc == 0 ? -ETIMEDOUT : rc;
}

struct ur_thread *ur_capture_find(struct ur_capture *c, pid_t tid) {
  for (size_t i = 0; i < c->n; i++)
    if (c->threads[i].tid == tid) return &c->threads[i];
  return NULL;
}

static struct ur_thread *add_thread(struct ur_capture *c, pid_t tid) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 16;
    struct ur_thread *t = realloc(c->threads, cap * sizeof(*t));
    if (!t) return NULL;
    c->threads = t;
    c->cap = cap;
  }
  struct ur_thread *t = &c->threads[c->n++];
  memset(t, 0, sizeof(*t));
  t->tid = tid;
  return t;
}

/* A thread that died while ours and whose exit is not reaped yet (a leader
 * waiting for its other threads, one woken by SIGKILL) is still traced by
 * us: release reaps it. */
static void note_dying(struct ur_capture *c, pid_t tid) {
  if (c->ndying == c->dying_cap) {
    size_t cap = c->dying_cap ? c->dying_cap * 2 : 8;
    pid_t *d = realloc(c->dying, cap * sizeof(*d));
    if (!d) return; /* the kernel reaps it when this process exits */
    c->dying = d;
    c->dying_cap = cap;
  }
  c->dying[c->ndying++] = tid;
}

static void drop_thread(struct ur_capture *c, struct ur_thread *t, bool reaped) {
  if (!reaped) note_dying(c, t->tid);
  free(t->xstate);
  *t = c->threads[--c->n];
}

/* tids of /proc/pid/task; -errno on failure. */
static int list_tasks(pid_t pid, pid_t **out, size_t *n) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -(errno == ENOENT ? ESRCH : errno);
  size_t cap = 64, k = 0;
  pid_t *tids = malloc(cap * sizeof(*tids));
  struct dirent *e;
  while (tids && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (k == cap) {
      pid_t *t = realloc(tids, (cap *= 2) * sizeof(*t));
      if (!t) {
        free(tids);
        tids = NULL;
        break;
      }
      tids = t;
    }
    tids[k++] = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  if (!tids) return -ENOMEM;
  *out = tids;
  *n = k;
  return 0;
}

static char task_state(pid_t pid, pid_t tid) {
  char path[96], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* comm may contain spaces and parens */
  return (p && p[1] == ' ') ? p[2] : 0;
}

static long status_field(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  long v = -1;
  size_t len = strlen(field);
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, field, len) == 0 && line[len] == ':') {
      v = strtol(line + len + 1, NULL, 10);
      break;
    }
  }
  fclose(f);
  return v;
}

static void read_comm(pid_t pid, char *buf, size_t len) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
  FILE *f = fopen(path, "re");
  buf[0] = 0;
  if (!f) return;
  if (fgets(buf, (int)len, f)) buf[strcspn(buf, "\n")] = 0;
  fclose(f);
}

static void explain_eperm(struct ur_capture *c, pid_t tid) {
  long tracer = status_field(tid, "TracerPid");
  if (tracer > 0) {
    char comm[64];
    read_comm((pid_t)tracer, comm, sizeof(comm));
    if (tracer == getpid())
      snprintf(c->err, sizeof(c->err),
               "process %d is already traced by this process (another open Session?)",
               (int)c->pid);
    else
      snprintf(c->err, sizeof(c->err),
               "process %d is already traced by process %ld (%s); a process can have only one "
               "tracer: detach the debugger/strace first",
               (int)c->pid, tracer, comm);
    return;
  }
  char scope[16] = "?";
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
  if (f) {
    if (fgets(scope, sizeof(scope), f)) scope[strcspn(scope, "\n")] = 0;
    fclose(f);
  }
  snprintf(c->err, sizeof(c->err),
           "no permission to ptrace process %d: run as its user with "
           "kernel.yama.ptrace_scope=0 (now %s), or with CAP_SYS_PTRACE; a non-dumpable or "
           "setuid target needs CAP_SYS_PTRACE",
           (int)c->pid, scope);
}

int ur_read_regs(struct ur_thread *t) {
  struct iovec iov = {&t->regs, sizeof(t->regs)};
  if (ptrace(PTRACE_GETREGSET, t->tid, (void *)NT_PRSTATUS, &iov) < 0) return -errno;
#if defined(__x86_64__)
  uint8_t *buf = malloc(XSTATE_MAX);
  if (!buf) return -ENOMEM;
  iov.iov_base = buf;
  iov.iov_len = XSTATE_MAX;
  if (ptrace(PTRACE_GETREGSET, t->tid, (void *)NT_X86_XSTATE, &iov) < 0) {
    free(buf); /* no XSAVE: registers alone */
    return 0;
  }
  uint8_t *shrunk = realloc(buf, iov.iov_len ? iov.iov_len : 1);
  t->xstate = shrunk ? shrunk : buf;
  t->xstate_len = iov.iov_len;
#endif
  return 0;
}

/* Interpret the first stop after PTRACE_INTERRUPT. Returns 1 if the thread
 * is stopped and ours, 0 if it exited. */
static int classify_stop(struct ur_capture *c, struct ur_thread *t, int status) {
  if (WIFEXITED(status) || WIFSIGNALED(status)) return 0;
  int sig = WSTOPSIG(status);
  int event = status >> 16;
  if (event == PTRACE_EVENT_STOP) {
    /* SIGTRAP: our interrupt. A stop signal: the thread is in group-stop
     * (the user's SIGSTOP); detaching leaves it stopped, as the kernel
     * re-enters the group-stop for a process whose stop is in effect. */
    if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
      t->group_stop = true;
      c->group_stopped = true;
    }
  } else if (event == 0) {
    /* Signal-delivery-stop: the signal is dequeued; hand it back at detach. */
    t->resume_sig = sig;
  }
  return 1;
}

static int fail(struct ur_capture *c, int rc) {
  ur_capture_release(c);
  ur_capture_free(c);
  return rc;
}

int ur_capture_stop(struct ur_capture *c, pid_t pid) {
  memset(c, 0, sizeof(*c));
  c->pid = pid;
  if (pid <= 0) {
    snprintf(c->err, sizeof(c->err), "invalid pid %d", (int)pid);
    return -EINVAL;
  }
  char self_task[64];
  snprintf(self_task, sizeof(self_task), "/proc/self/task/%d", (int)pid);
  if (pid == getpid() || access(self_task, F_OK) == 0) {
    snprintf(c->err, sizeof(c->err), "pid %d is the scanner itself; it cannot stop itself",
             (int)pid);
    return -EINVAL;
  }
  /* Repeat until a full pass finds no new thread: once every listed thread
   * is stopped, nobody is left to create one. */
  for (;;) {
    pid_t *tids = NULL;
    size_t ntids = 0;
    int rc = list_tasks(pid, &tids, &ntids);
    if (rc < 0) {
      snprintf(c->err, sizeof(c->err), "no such process %d", (int)pid);
      return fail(c, rc);
    }
    size_t first_new = c->n;
    for (size_t i = 0; i < ntids; i++) {
      pid_t tid = tids[i];
      if (ur_capture_find(c, tid)) continue;
      if (!c->t_first_seize_ns) c->t_first_seize_ns = ur_now_ns();
      if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
        int err = errno;
        if (err == ESRCH) continue; /* exited meanwhile */
        if (err == EPERM) {
          char st = task_state(pid, tid);
          if (st == 'Z' || st == 'X') continue; /* exiting or zombie leader */
          explain_eperm(c, tid);
        } else {
          snprintf(c->err, sizeof(c->err), "PTRACE_SEIZE %d: %s", (int)tid, strerror(err));
        }
        free(tids);
        return fail(c, -err);
      }
      struct ur_thread *t = add_thread(c, tid);
      if (!t) {
        ptrace(PTRACE_DETACH, tid, NULL, NULL); /* seized, not stopped: allowed for SEIZE */
        free(tids);
        snprintf(c->err, sizeof(c->err), "out of memory");
        return fail(c, -ENOMEM);
      }
      t->attached = true;
      t->running = true;
      ptrace(PTRACE_INTERRUPT, tid, NULL, NULL); /* ESRCH: the wait reports the exit */
    }
    free(tids);
    if (!c->t_interrupted_ns) c->t_interrupted_ns = ur_now_ns();
    if (c->n == first_new) break;
    /* Wait for the new ones after interrupting all of them, so busy threads
     * stop in parallel. */
    for (size_t i = first_new; i < c->n;) {
      struct ur_thread *t = &c->threads[i];
      int status = 0;
      int r = ur_wait_stop(t->tid, &status, STOP_TIMEOUT_NS);
      if (r == 0) {
        snprintf(c->err, sizeof(c->err), "thread %d did not stop within %llu s (state %c)",
                 (int)t->tid, STOP_TIMEOUT_NS / 1000000000ull, task_state(pid, t->tid));
        return fail(c, -ETIMEDOUT);
      }
      if (r < 0 || !classify_stop(c, t, status)) {
        drop_thread(c, t, r > 0);
        continue;
      }
      t->running = false;
      c->t_last_stop_ns = ur_now_ns();
      if (!c->t_first_stop_ns) c->t_first_stop_ns = c->t_last_stop_ns;
      i++;
    }
  }
  for (size_t i = 0; i < c->n;) {
    int r = ur_read_regs(&c->threads[i]);
    if (r == -ESRCH) { /* killed while stopped (SIGKILL wakes tracees) */
      int status;
      pid_t tid = c->threads[i].tid;
      drop_thread(c, &c->threads[i], waitpid(tid, &status, __WALL | WNOHANG) == tid);
      continue;
    }
    if (r < 0) {
      snprintf(c->err, sizeof(c->err), "PTRACE_GETREGSET %d: %s", (int)c->threads[i].tid,
               strerror(-r));
      return fail(c, r);
    }
    i++;
  }
  if (c->n == 0) {
    snprintf(c->err, sizeof(c->err), "process %d exited", (int)pid);
    return fail(c, -ESRCH);
  }
  c->t_regs_ns = ur_now_ns();
  return 0;
}

/* 0: detached; -ESRCH: it died, exit reaped here; -EAGAIN: it is dying and
 * its exit is still to be reaped. */
static int detach_one(struct ur_thread *t) {
  if (t->running) {
    /* Resumed by us (the snapshot helper): it must be in a ptrace-stop to
     * be detached. */
    int status;
    ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL);
    if (ur_wait_stop(t->tid, &status, 1000000000ull) == 1) {
      if (WIFEXITED(status) || WIFSIGNALED(status)) return -ESRCH;
      if ((status >> 16) == 0 && !t->resume_sig) t->resume_sig = WSTOPSIG(status);
    }
    t->running = false;
  }
  if (ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(long)t->resume_sig) == 0) return 0;
  return -EAGAIN; /* not in a ptrace-stop: SIGKILL woke it */
}

/* A thread that died while traced stays ours until we reap its exit:
 * unreaped, its real parent never learns of the death and a new
 * PTRACE_SEIZE of it fails with EPERM. A leader is reapable only after its
 * other threads, which may come later in the list: poll them together. */
static void reap_dying(struct ur_capture *c, uint64_t timeout_ns) {
  uint64_t deadline = ur_now_ns() + timeout_ns;
  while (c->ndying) {
    for (size_t i = 0; i < c->ndying;) {
      int status;
      pid_t r = waitpid(c->dying[i], &status, __WALL | WNOHANG);
      if (r == c->dying[i] && WIFSTOPPED(status))
        ptrace(PTRACE_DETACH, c->dying[i], NULL, NULL); /* a last stop, not the exit */
      if (r == c->dying[i] || (r < 0 && errno == ECHILD))
        c->dying[i] = c->dying[--c->ndying];
      else
        i++;
    }
    if (!c->ndying || ur_now_ns() >= deadline) break;
    sleep_ns(1000000);
  }
  c->ndying = 0; /* past the deadline the kernel reaps them when we exit */
}

int ur_capture_release(struct ur_capture *c) {
  int failed = 0;
  for (size_t i = 0; i < c->n; i++) {
    struct ur_thread *t = &c->threads[i];
    if (!t->attached) continue;
    t->attached = false;
    int r = detach_one(t);
    if (r == 0) continue;
    failed++;
    if (r == -EAGAIN) note_dying(c, t->tid);
  }
  reap_dying(c, 2000000000ull);
  return failed;
}

void ur_capture_free(struct ur_capture *c) {
  free(c->dying);
  c->dying = NULL;
  c->ndying = c->dying_cap = 0;
  for (size_t i = 0; i < c->n; i++) free(c->threads[i].xstate);
  free(c->threads);
  c->threads = NULL;
  c->n = c->cap = 0;
}

/* Whether a stopped thread is inside [lo, hi): its pc there, or the word
 * on top of its stack a return address there (a leaf it called: memcpy
 * under realloc's lock). */
static bool inside_code(const struct ur_thread *t, uint64_t lo, uint64_t hi) {
#if defined(__x86_64__)
  uint64_t pc = t->regs.rip, sp = t->regs.rsp;
#else
  uint64_t pc = t->regs.pc, sp = t->regs.sp;
#endif
  if (pc >= lo && pc < hi) return true;
  errno = 0;
  long ret = ptrace(PTRACE_PEEKDATA, t->tid, (void *)(uintptr_t)sp, NULL);
  return errno == 0 && (uint64_t)ret >= lo && (uint64_t)ret < hi;
}

static bool ours_to_run(const struct ur_thread *t) {
  return t->attached && !t->running && !t->group_stop && !t->resume_sig;
}

int ur_capture_run_out(struct ur_capture *c, uint64_t lo, uint64_t hi, unsigned rounds) {
  bool *run = calloc(c->n ? c->n : 1, sizeof(*run));
  if (!run) return -ENOMEM;
  int rc = 0, inside = 0;
  for (unsigned round = 0; round <= rounds; round++) {
    inside = 0;
    for (size_t i = 0; i < c->n; i++) {
      run[i] = false;
      if (!inside_code(&c->threads[i], lo, hi)) continue;
      inside++;
      run[i] = round < rounds && ours_to_run(&c->threads[i]);
    }
    if (!inside || round == rounds) break;
    size_t started = 0;
    for (size_t i = 0; i < c->n; i++)
      if (run[i] && ptrace(PTRACE_CONT, c->threads[i].tid, NULL, NULL) == 0) started++;
      else run[i] = false;
    if (!started) break; /* none of those inside may be run */
    /* Long enough for a malloc call to finish, short enough to stop the
     * thread before it is in the next: 20 us, growing to 160. */
    sleep_ns(20000ull << (round < 3 ? round : 3));
    for (size_t i = 0; i < c->n; i++) {
      if (!run[i]) continue;
      struct ur_thread *t = &c->threads[i];
      int status;
      ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL);
      int w = ur_wait_stop(t->tid, &status, 1000000000ull);
      if (w != 1 || WIFEXITED(status) || WIFSIGNALED(status)) {
        t->attached = w == 1 ? false : t->attached;
        rc = w < 0 ? w : -ESRCH;
        goto out;
      }
      /* A signal that arrived meanwhile: handed back at detach. */
      if ((status >> 16) == 0) t->resume_sig = WSTOPSIG(status);
      free(t->xstate);
      t->xstate = NULL;
      t->xstate_len = 0;
      if ((rc = ur_read_regs(t)) < 0) goto out;
    }
  }
out:
  free(run);
  return rc < 0 ? rc : inside;
}
