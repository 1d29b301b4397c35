/* Injected system calls (syscall_inject.h). */
#include "syscall_inject.h"

#include <errno.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef __x86_64__
#error "the injected calls are written for x86-64"
#endif

/* The kernel's restart codes (include/linux/errno.h): never seen by user
 * space, only in a stopped thread's rax. */
#define K_ERESTARTSYS 512
#define K_ERESTARTNOINTR 513
#define K_ERESTARTNOHAND 514
#define K_ERESTART_RESTARTBLOCK 516

/* A thread stopped inside an interrupted system call resumes through the
 * kernel's restart logic only on its way out of a signal stop; let go
 * from the injected call's syscall-exit-stop it would see the restart code
 * in rax. So the registers it gets back are the ones the kernel would
 * have given it: the call again (rip back over the 2-byte syscall
 * instruction), or restart_syscall, which resumes a sleep or a timed wait
 * from the thread's restart block (clone and wait4 leave it alone). No
 * signal is being delivered to the thread (one that was is never picked),
 * so ERESTARTSYS and ERESTARTNOHAND restart as with no handler. */
struct user_regs_struct ur_as_resumed(struct user_regs_struct r) {
  if ((long long)r.orig_rax < 0) return r;
  switch (-(long long)r.rax) {
  case K_ERESTARTSYS:
  case K_ERESTARTNOINTR:
  case K_ERESTARTNOHAND:
    r.rax = r.orig_rax;
    r.rip -= 2;
    break;
  case K_ERESTART_RESTARTBLOCK:
    r.rax = SYS_restart_syscall;
    r.rip -= 2;
    break;
  }
  return r;
}

/* Run the system call nr(a...) in the stopped thread t, from the syscall
 * instruction at ip, with every signal blocked, and put its registers and
 * mask back. Returns the call's result (-errno from the call itself), or
 * sets *fail to the -errno of the injection. A clone's child, reported
 * by PTRACE_EVENT_CLONE, goes to *born. */
long ur_inject_syscall(struct ur_thread *t, uint64_t ip, long nr, const uint64_t a[5],
                       void (*hold)(const char *step), const char *step, pid_t *born, int *fail) {
  pid_t tid = t->tid;
  long result = 0;
  struct user_regs_struct saved, r;
  uint64_t oldmask = 0, all = ~UINT64_C(0);
  *fail = 0;
  if (ptrace(PTRACE_GETREGS, tid, NULL, &saved) < 0 ||
      ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(oldmask), &oldmask) < 0) {
    *fail = -errno;
    return 0;
  }
  long opts = PTRACE_O_TRACESYSGOOD | (born ? PTRACE_O_TRACECLONE : 0);
  r = saved;
  r.rip = ip;
  r.rax = (unsigned long long)nr;
  r.orig_rax = (unsigned long long)-1; /* no restart on the way to our call */
  r.rdi = a[0], r.rsi = a[1], r.rdx = a[2], r.r10 = a[3], r.r8 = a[4];
  if (ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(all), &all) < 0 ||
      ptrace(PTRACE_SETOPTIONS, tid, NULL, (void *)opts) < 0 ||
      ptrace(PTRACE_SETREGS, tid, NULL, &r) < 0) {
    *fail = -errno;
    goto restore;
  }
  if (hold) hold(step);
  int syscall_stops = 0;
  while (syscall_stops < 2) {
    int status;
    if (ptrace(PTRACE_SYSCALL, tid, NULL, NULL) < 0) {
      *fail = -errno;
      goto restore;
    }
    int w = ur_wait_stop(tid, &status, UR_INJECT_STEP_NS);
    if (w == 0) {
      /* Stuck in the call (D state): it is let go with its own registers
       * only, so it is waited for as long as it takes to stop. */
      ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
      while ((w = ur_wait_stop(tid, &status, UR_INJECT_STEP_NS)) == 0) {
      }
      *fail = -ETIMEDOUT;
    }
    if (w != 1 || WIFEXITED(status) || WIFSIGNALED(status)) {
      t->attached = false;
      *fail = -ESRCH;
      return 0;
    }
    if (*fail) goto restore;
    int event = status >> 16;
    if (WSTOPSIG(status) == (SIGTRAP | 0x80)) {
      syscall_stops++;
    } else if (event == PTRACE_EVENT_CLONE && born) {
      unsigned long msg = 0;
      ptrace(PTRACE_GETEVENTMSG, tid, NULL, &msg);
      *born = (pid_t)msg;
    } else if (event == 0 && !t->resume_sig) {
      /* SIGSTOP (the rest are blocked): handed back when it is let go. */
      t->resume_sig = WSTOPSIG(status);
    }
  }
  if (ptrace(PTRACE_GETREGS, tid, NULL, &r) < 0) {
    *fail = -errno;
    goto restore;
  }
  result = (long)r.rax;
restore:;
  struct user_regs_struct back = ur_as_resumed(saved);
  if (ptrace(PTRACE_SETREGS, tid, NULL, &back) < 0 && !*fail) *fail = -errno;
  ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(oldmask), &oldmask);
  ptrace(PTRACE_SETOPTIONS, tid, NULL, NULL);
  return result;
}
