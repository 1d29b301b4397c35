/*
 * unreachable-stopper PID: the process that stops a target running without
 * the shim and makes its copy-on-write snapshot by injecting clone() into
 * one of its stopped threads (docs/glibc-heap.md, "The snapshot").
 *
 * It is a process of its own, in a session of its own, so that it outlives
 * the scanner: between the injection and the restore a target thread runs
 * with registers that are not its own, and a tracer that dies then lets it
 * run them. The scanner talks to it over a pipe (stdin: commands, one a
 * line; stdout: replies); when the pipe closes, whatever the scanner was
 * doing, the stopper finishes the step it is in, lets every thread go with
 * its own registers and signal mask, kills the snapshot child and reaps it
 * through the target, then exits. It writes the target's memory only to
 * put back the dead stack words a sigaltstack() query answered in.
 *
 * Commands and replies (errors: "err ERRNO message"):
 * Started as "unreachable-stopper PID SYSCALL_IP" (a syscall instruction
 * in the target's code, hex).
 *   stop LO HI ROUNDS FLAGS ASK (malloc's code, rounds to run threads out
 *   of it, the clone flags the filters are checked for, 1 to ask each
 *   thread's sigaltstack once none is inside malloc)
 *     -> "ok LEFT NTHREADS INJECT_TID NSIGNALS REASON..." then, per thread,
 *        a header (tid, sp, regs length, xstate length) and its regs and
 *        xstate, then NSIGNALS 64-bit sigvals. INJECT_TID 0: no thread can
 *        take the clone (REASON says why); release and copy instead. With
 *        ASK, then "N UNREAD WHY..." and N records of struct
 *        ur_signal_stack (each thread's sigaltstack, asked by an injected
 *        call; UNREAD threads could not be asked, WHY says why; UNREAD -1:
 *        none was). Asked in the stop's own command: the scanner waits for
 *        one reply, not two, while the target is held.
 *   clone TID FLAGS -> "ok CHILD": the child is frozen, the target still
 *     stopped (a failed clone lets it go)
 *   release     -> "ok PAUSE_NS HOLD_NS": the target runs (the pause from the
 *     first seize, the hold from the last thread stopped: docs/pause.md)
 *   close       -> "ok" (the child killed and reaped), and the stopper exits
 * UNREACHABLE_TEST_KILL_AT=sigaltstack|clone|wait4 (tests only): with the injected
 * registers in place (sigaltstack: every thread asked inside its call), the
 * stopper says "hold STEP" and waits for a line or the end of the pipe
 * before it goes on.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pending_signals.h"
#include "seccomp_check.h"
#include "signal_stack_query.h"
#include "syscall_inject.h"
#include "thread_capture.h"

#ifndef __x86_64__
#error "the injected clone is written for x86-64"
#endif

#define STEP_NS UR_INJECT_STEP_NS
#define REAP_TRIES 50

static struct ur_capture cap;
static bool stopped;       /* cap holds the target's threads */
static pid_t child;        /* the frozen snapshot child, ours to kill */
static pid_t child_there;  /* its pid in the target's pid namespace, for the reap */
static pid_t cloner;       /* the thread that made it (first choice for the reap) */
static uint64_t pause_end; /* when the target was let go */
static const char *kill_at;

static void put(const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t w = write(1, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* the scanner is gone: the pipe's end is read next */
    p += w;
    n -= (size_t)w;
  }
}

static void say(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof(line) - 2) n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  put(line, (size_t)n);
}

/* One line from the scanner into buf; false at the end of the pipe. */
static bool get_line(char *buf, size_t len) {
  size_t n = 0;
  while (n + 1 < len) {
    char c;
    ssize_t r = read(0, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    if (c == '\n') break;
    buf[n++] = c;
  }
  buf[n] = 0;
  return true;
}

static void hold(const char *step) {
  if (!kill_at || strcmp(kill_at, step) != 0) return;
  char line[64];
  say("hold %s", step);
  get_line(line, sizeof(line));
}

static struct ur_thread *pick(void) {
  for (size_t i = 0; i < cap.n; i++) {
    struct ur_thread *t = &cap.threads[i];
    if (t->attached && !t->running && !t->group_stop && !t->resume_sig) return t;
  }
  return NULL;
}

/* Why the filters of t could stop the clone or the reap ("" when they
 * cannot). The reap's pid is not known yet: a filter that reads it is
 * refused. */
static const char *filter_refuses(pid_t pid, pid_t tid, uint64_t flags) {
  /* No filter: nothing to read (reading one takes CAP_SYS_ADMIN and a
   * reader under no filter of its own, which a hardened service is not). */
  int mode = ur_seccomp_mode(pid, tid);
  if (mode == 0) return "";
  if (mode == 1) return "it runs in seccomp's strict mode";
  const uint64_t clone_args[UR_SECCOMP_ARGS_KNOWN] = {flags, 0, 0, 0, 0};
  const uint64_t wait_args[UR_SECCOMP_ARGS_KNOWN] = {0, 0, __WALL | WNOHANG, 0, 0};
  int c = ur_seccomp_allows_known(tid, SYS_clone, clone_args, 0x1f, true);
  int w = ur_seccomp_allows_known(tid, SYS_wait4, wait_args, 0x1e, false);
  if (c < 0 || w < 0) return "its seccomp filter cannot be read";
  if (!c) return "its seccomp filter does not provably allow clone()";
  if (!w) return "its seccomp filter does not provably allow wait4()";
  return "";
}

static void release(void) {
  if (!stopped) return;
  ur_capture_release(&cap);
  pause_end = ur_now_ns();
  stopped = false;
}

/* Each thread's alternate signal stack (signal_stack_query.h), asked
 * before the clone so the scratch words are back when the child copies
 * them: "N UNREAD WHY..." into line, the records into *out (to free). */
static size_t ask_signal_stacks(uint64_t ip, int left, char *line, size_t len,
                                struct ur_signal_stack **out) {
  size_t n = 0;
  char why[160];
  *out = left || !ip ? NULL : calloc(cap.n + 1, sizeof(**out));
  if (!ip) snprintf(line, len, "0 -1 no syscall instruction was given to ask them from");
  else if (left) snprintf(line, len, "0 -1 threads stayed inside malloc");
  else if (!*out) snprintf(line, len, "0 -1 out of memory");
  else {
    size_t unread = ur_query_signal_stacks(&cap, ip, hold, *out, &n, why, sizeof(why));
    snprintf(line, len, "%zu %zu %s", n, unread, why);
  }
  return n;
}

static void cmd_stop(pid_t pid, uint64_t ip, const char *args) {
  unsigned long long lo, hi, flags;
  unsigned rounds;
  int ask;
  if (stopped || child ||
      sscanf(args, "%llx %llx %u %llx %d", &lo, &hi, &rounds, &flags, &ask) != 5) {
    say("err %d bad stop command", EINVAL);
    return;
  }
  int rc = ur_capture_stop(&cap, pid);
  if (rc < 0) {
    say("err %d %s", -rc, cap.err);
    return;
  }
  stopped = true;
  int left = 0;
  if (hi && (left = ur_capture_run_out(&cap, lo, hi, rounds)) < 0) {
    rc = left;
    release();
    say("err %d running a thread out of malloc failed", -rc);
    return;
  }
  struct ur_signal_stack *stacks = NULL;
  char asked[200];
  size_t nstacks = ask ? ask_signal_stacks(ip, left, asked, sizeof(asked), &stacks) : 0;
  uint64_t *sigvals = NULL;
  long nsig = ur_pending_signal_values(&cap, &sigvals);
  if (nsig < 0) {
    free(stacks);
    release();
    say("err %d cannot read the target's queued signals", (int)-nsig);
    return;
  }
  struct ur_thread *t = pick();
  const char *why = t ? filter_refuses(pid, t->tid, flags) : "every thread is taking a signal or stopped";
  pid_t tid = t && !*why ? t->tid : 0;
  say("ok %d %zu %d %ld %s", left, cap.n, (int)tid, nsig, why);
  for (size_t i = 0; i < cap.n; i++) {
    struct ur_thread *th = &cap.threads[i];
    struct {
      int32_t tid, pad;
      uint64_t sp;
      uint32_t regs_len, xstate_len;
    } head = {th->tid, 0, th->regs.rsp, sizeof(th->regs), (uint32_t)th->xstate_len};
    put(&head, sizeof(head));
    put(&th->regs, sizeof(th->regs));
    put(th->xstate, th->xstate_len);
  }
  put(sigvals, (size_t)nsig * sizeof(*sigvals));
  free(sigvals);
  if (ask) {
    say("%s", asked);
    put(stacks, nstacks * sizeof(*stacks));
  }
  free(stacks);
}

static void cmd_clone(uint64_t ip, const char *args) {
  unsigned long long flags;
  int tid;
  struct ur_thread *t = NULL;
  if (!stopped || child || sscanf(args, "%d %llx", &tid, &flags) != 2 ||
      !(t = ur_capture_find(&cap, tid))) {
    say("err %d bad clone command", EINVAL);
    return;
  }
  const uint64_t a[5] = {flags, 0, 0, 0, 0};
  pid_t born = 0;
  int fail;
  long got = ur_inject_syscall(t, ip, SYS_clone, a, hold, "clone", &born, &fail);
  if (born > 0) {
    /* Ours to kill and reap whatever happens next. Auto-attached, it stops
     * before its first instruction. */
    child = born;
    /* The event names the child in our pid namespace, the clone's return
     * value in the target's: a target in a container waits by that one. */
    child_there = got > 0 ? (pid_t)got : born;
    cloner = t->tid;
    int status = 0;
    int w = ur_wait_stop(born, &status, STEP_NS);
    if (w == 1 && WIFSTOPPED(status))
      ptrace(PTRACE_SETOPTIONS, born, NULL, (void *)PTRACE_O_EXITKILL);
    else if (!fail)
      fail = -ECHILD;
  }
  if (fail || got < 0 || !child) {
    release();
    int e = fail ? -fail : got < 0 ? (int)-got : ECHILD;
    say("err %d the injected clone failed: %s", e, strerror(e));
    return;
  }
  /* Still stopped: the scanner reads what the child lacks (memory kept out
   * of forks) from the target, then says release. */
  say("ok %d", (int)child);
}

/* One thread of the target stopped by itself, for the reap. */
static bool seize_one(struct ur_thread *t, pid_t tid) {
  memset(t, 0, sizeof(*t));
  t->tid = tid;
  if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) return false;
  int status = 0;
  ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
  int w = ur_wait_stop(tid, &status, STEP_NS);
  if (w != 1 || WIFEXITED(status) || WIFSIGNALED(status)) {
    if (w != 1) ptrace(PTRACE_DETACH, tid, NULL, NULL);
    return false;
  }
  t->attached = true;
  int event = status >> 16;
  if (event == 0) t->resume_sig = WSTOPSIG(status);
  if (event == PTRACE_EVENT_STOP && WSTOPSIG(status) != SIGTRAP) t->group_stop = true;
  return true;
}

/* The thread to reap from: the one that cloned, else each of the
 * process's threads in turn. */
static pid_t reap_thread(pid_t pid, int attempt) {
  if (attempt == 0 && cloner) return cloner;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  pid_t tids[64];
  int n = 0;
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 64)
    if (e->d_name[0] != '.') tids[n++] = (pid_t)atoi(e->d_name);
  closedir(d);
  return n ? tids[attempt % n] : 0;
}

/* SIGKILL the child and reap it as its tracer: until then its zombie is
 * ours alone, and the target's wait4 finds nothing. A blocking wait: a
 * killed task always exits (a child tearing down a large address space
 * can take longer than any timeout picked here). */
static void kill_child(void) {
  kill(child, SIGKILL);
  for (;;) {
    int status;
    pid_t r = waitpid(child, &status, __WALL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || WIFEXITED(status) || WIFSIGNALED(status)) return;
    ptrace(PTRACE_CONT, child, NULL, NULL); /* a stop racing with the kill */
  }
}

/* Kill the child and have the target reap its zombie with an injected
 * wait4(child, NULL, __WALL | WNOHANG): it is the target's child, and
 * reaped by the target it never shows in its waitpid(-1) or SIGCHLD (its
 * exit signal is 0). Returns 0 or -errno. */
static int close_child(pid_t pid, uint64_t ip) {
  if (!child) return 0;
  kill_child();
  int rc = -EAGAIN;
  for (int attempt = 0; attempt < REAP_TRIES && rc == -EAGAIN; attempt++) {
    if (attempt) usleep(1000u << (attempt < 6 ? attempt : 6));
    pid_t tid = reap_thread(pid, attempt);
    struct ur_thread t;
    if (!tid || !seize_one(&t, tid)) continue;
    /* A thread in a group stop may take it: let go, it stops again, as
     * the kernel puts a detached thread of a stopped process back in its
     * group stop. */
    if (!t.resume_sig && !*filter_refuses(pid, tid, 0)) {
      const uint64_t a[5] = {(uint64_t)child_there, 0, __WALL | WNOHANG, 0, 0};
      int fail;
      long got = ur_inject_syscall(&t, ip, SYS_wait4, a, hold, "wait4", NULL, &fail);
      if (!fail && (got == child_there || got == -ECHILD)) rc = 0;
      else if (!fail && got != 0) rc = (int)got;
    }
    if (t.attached) ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)t.resume_sig);
  }
  child = child_there = 0;
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: unreachable-stopper PID SYSCALL_IP\n");
    return 2;
  }
  /* Only the end of the pipe ends it: a signal meant for the scanner's
   * terminal must not cut an injection short. */
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  sigaddset(&block, SIGQUIT);
  sigprocmask(SIG_BLOCK, &block, NULL);
  signal(SIGPIPE, SIG_IGN);
  pid_t pid = (pid_t)strtol(argv[1], NULL, 10);
  uint64_t ip = strtoull(argv[2], NULL, 16);
  kill_at = getenv("UNREACHABLE_TEST_KILL_AT");
  char line[256];
  while (get_line(line, sizeof(line))) {
    if (strncmp(line, "stop ", 5) == 0) {
      cmd_stop(pid, ip, line + 5);
    } else if (strncmp(line, "clone ", 6) == 0) {
      cmd_clone(ip, line + 6);
    } else if (strcmp(line, "release") == 0) {
      release();
      say("ok %llu %llu", (unsigned long long)(pause_end - cap.t_first_seize_ns),
          (unsigned long long)(pause_end - cap.t_last_stop_ns));
    } else if (strcmp(line, "close") == 0) {
      release();
      int rc = close_child(pid, ip);
      if (rc < 0) say("err %d the snapshot child could not be reaped: %s", -rc, strerror(-rc));
      else say("ok");
      return 0;
    } else {
      say("err %d unknown command", EINVAL);
    }
  }
  release();
  close_child(pid, ip);
  return 0;
}
