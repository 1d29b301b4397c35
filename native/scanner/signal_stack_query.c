/* Each thread's alternate signal stack, asked of the kernel (signal_stack_query.h). */
#include "signal_stack_query.h"

#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

#include "seccomp_check.h"
#include "syscall_inject.h"

/* The x86-64 ABI lets a leaf function keep data in the 128 bytes below its
 * SP; what lies below that is dead (a signal frame would overwrite it). */
#define RED_ZONE 128
#define OLD_WORDS 3 /* stack_t: ss_sp, ss_flags (and padding), ss_size */

static const char *seccomp_refuses(pid_t pid, pid_t tid, uint64_t old) {
  char path[96], line[256];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
  FILE *f = fopen(path, "re");
  if (!f) return "its status cannot be read";
  int mode = -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "Seccomp: %d", &mode) == 1) break;
  fclose(f);
  if (mode == 0) return "";
  if (mode == 1) return "it runs in seccomp's strict mode";
  const uint64_t args[UR_SECCOMP_ARGS_KNOWN] = {0, old, 0, 0, 0};
  int ok = ur_seccomp_allows_known(tid, SYS_sigaltstack, args, 0x1f, true);
  if (ok < 0) return "its seccomp filter cannot be read";
  return ok ? "" : "its seccomp filter does not provably allow sigaltstack()";
}

static bool peek(pid_t tid, uint64_t at, uint64_t w[OLD_WORDS]) {
  for (int i = 0; i < OLD_WORDS; i++) {
    errno = 0;
    long v = ptrace(PTRACE_PEEKDATA, tid, (void *)(at + 8u * (unsigned)i), NULL);
    if (errno) return false;
    w[i] = (uint64_t)v;
  }
  return true;
}

/* Put back the words of w that differ from now (all when now is unknown). */
static void poke(pid_t tid, uint64_t at, const uint64_t w[OLD_WORDS], const uint64_t *now) {
  for (int i = 0; i < OLD_WORDS; i++)
    if (!now || now[i] != w[i])
      ptrace(PTRACE_POKEDATA, tid, (void *)(at + 8u * (unsigned)i), (void *)w[i]);
}

/* One thread's stack into *s: 1 with one, 0 without (or gone), or -1 with
 * *why set. */
static int ask(struct ur_capture *c, struct ur_thread *t, uint64_t ip,
               void (*hold)(const char *step), struct ur_signal_stack *s, const char **why) {
  if (!t->attached || t->running || t->group_stop || t->resume_sig) {
    *why = "a thread was taking a signal or in a group stop";
    return -1;
  }
  /* 32-byte aligned: the 24 bytes lie in one page, so the kernel's write
   * is whole or none. */
  uint64_t old = (t->regs.rsp - RED_ZONE - 8u * OLD_WORDS) & ~UINT64_C(31);
  if (*(*why = seccomp_refuses(c->pid, t->tid, old))) return -1;
  uint64_t saved[OLD_WORDS], got[OLD_WORDS];
  if (!peek(t->tid, old, saved)) {
    *why = "the stack below a thread's SP cannot be read";
    return -1;
  }
  const uint64_t a[5] = {0, old, 0, 0, 0};
  int fail;
  long rc = ur_inject_syscall(t, ip, SYS_sigaltstack, a, hold, "sigaltstack", NULL, &fail);
  if (fail == -ESRCH) return 0; /* exited: its stack is nobody's root */
  bool read = !fail && rc == 0 && peek(t->tid, old, got);
  /* A failed call wrote nothing (EFAULT on a guard page, which a forced
   * write would fill with a page of its own); else the words it changed. */
  if (fail || rc == 0) poke(t->tid, old, saved, read ? got : NULL);
  if (!read) {
    *why = fail || rc ? "the injected sigaltstack() failed" : "the answer could not be read";
    return -1;
  }
  if ((got[1] & SS_DISABLE) || !got[0]) return 0;
  *s = (struct ur_signal_stack){t->tid, 0, got[0], got[2]};
  return 1;
}

size_t ur_query_signal_stacks(struct ur_capture *c, uint64_t ip, void (*hold)(const char *step),
                              struct ur_signal_stack *out, size_t *nout, char *why,
                              size_t why_len) {
  size_t unread = 0;
  *nout = 0;
  if (why_len) why[0] = 0;
  for (size_t i = 0; i < c->n; i++) {
    const char *reason = "";
    int got = ask(c, &c->threads[i], ip, hold, &out[*nout], &reason);
    if (got > 0) (*nout)++;
    if (got < 0 && unread++ == 0 && why_len) snprintf(why, why_len, "%s", reason);
  }
  return unread;
}
