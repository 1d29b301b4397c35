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
 * instruction at ip, with every signal blocked: its registers and mask are
 * saved and the call's put in place (syscall_inject.h). */
void ur_inject_begin(struct ur_injection *j, struct ur_thread *t, uint64_t ip, long nr,
                     const uint64_t a[5], bool clones) {
  uint64_t all = ~UINT64_C(0);
  *j = (struct ur_injection){.t = t};
  if (ptrace(PTRACE_GETREGS, t->tid, NULL, &j->saved) < 0 ||
      ptrace(PTRACE_GETSIGMASK, t->tid, (void *)sizeof(j->oldmask), &j->oldmask) < 0) {
    j->fail = -errno;
    return;
  }
  j->placed = true;
  long opts = PTRACE_O_TRACESYSGOOD | (clones ? PTRACE_O_TRACECLONE : 0);
  struct user_regs_struct r = j->saved;
  r.rip = ip;
  r.rax = (unsigned long long)nr;
  r.orig_rax = (unsigned long long)-1; /* no restart on the way to our call */
  r.rdi = a[0], r.rsi = a[1], r.rdx = a[2], r.r10 = a[3], r.r8 = a[4];
  if (ptrace(PTRACE_SETSIGMASK, t->tid, (void *)sizeof(all), &all) < 0 ||
      ptrace(PTRACE_SETOPTIONS, t->tid, NULL, (void *)opts) < 0 ||
      ptrace(PTRACE_SETREGS, t->tid, NULL, &r) < 0)
    j->fail = -errno;
}

/* Let j's thread run on to its next stop. */
void ur_inject_resume(struct ur_injection *j) {
  if (j->fail || !j->placed || j->stops >= 2) return;
  if (ptrace(PTRACE_SYSCALL, j->t->tid, NULL, NULL) < 0) j->fail = -errno;
}

/* Wait for j's thread, resumed, until it has made `stops` syscall stops
 * (1: inside the call, 2: back from it), letting it on past any other
 * stop. A clone's child, reported by PTRACE_EVENT_CLONE, goes to *born. */
void ur_inject_wait(struct ur_injection *j, int stops, pid_t *born) {
  pid_t tid = j->t->tid;
  while (!j->fail && j->placed && j->stops < stops) {
    int status;
    int w = ur_wait_stop(tid, &status, UR_INJECT_STEP_NS);
    if (w == 0) {
      /* Stuck in the call (D state): it is let go with its own registers
       * only, so it is waited for as long as it takes to stop. */
      ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
      while ((w = ur_wait_stop(tid, &status, UR_INJECT_STEP_NS)) == 0) {
      }
      j->fail = -ETIMEDOUT;
    }
    if (w != 1 || WIFEXITED(status) || WIFSIGNALED(status)) {
      j->t->attached = false;
      j->placed = false; /* nothing to put back */
      j->fail = -ESRCH;
      return;
    }
    if (j->fail) return;
    int event = status >> 16;
    if (WSTOPSIG(status) == (SIGTRAP | 0x80)) {
      if (++j->stops >= stops) return;
    } else if (event == PTRACE_EVENT_CLONE && born) {
      unsigned long msg = 0;
      ptrace(PTRACE_GETEVENTMSG, tid, NULL, &msg);
      *born = (pid_t)msg;
    } else if (event == 0 && !j->t->resume_sig) {
      /* SIGSTOP (the rest are blocked): handed back when it is let go. */
      j->t->resume_sig = WSTOPSIG(status);
    }
    ur_inject_resume(j);
  }
}

/* The call's result once back from it, and j's thread given back its own
 * registers, as the kernel would resume them, and signal mask. */
long ur_inject_end(struct ur_injection *j) {
  long result = 0;
  if (!j->placed) return 0;
  pid_t tid = j->t->tid;
  struct user_regs_struct r;
  if (!j->fail && j->stops < 2) j->fail = -EINTR; /* never finished: not asked */
  if (!j->fail) {
    if (ptrace(PTRACE_GETREGS, tid, NULL, &r) < 0) j->fail = -errno;
    else result = (long)r.rax;
  }
  struct user_regs_struct back = ur_as_resumed(j->saved);
  if (ptrace(PTRACE_SETREGS, tid, NULL, &back) < 0 && !j->fail) j->fail = -errno;
  ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(j->oldmask), &j->oldmask);
  ptrace(PTRACE_SETOPTIONS, tid, NULL, NULL);
  j->placed = false;
  return result;
}

long ur_inject_syscall(struct ur_thread *t, uint64_t ip, long nr, const uint64_t a[5],
                       void (*hold)(const char *step), const char *step, pid_t *born, int *fail) {
  struct ur_injection j;
  ur_inject_begin(&j, t, ip, nr, a, born != NULL);
  if (!j.fail) {
    if (hold) hold(step);
    ur_inject_resume(&j);
    ur_inject_wait(&j, 2, born);
  }
  long result = ur_inject_end(&j);
  *fail = j.fail;
  return result;
}
