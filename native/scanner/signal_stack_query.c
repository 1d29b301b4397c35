/* Each thread's alternate signal stack, asked of the kernel (signal_stack_query.h). */
#include "signal_stack_query.h"

#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "seccomp_check.h"
#include "syscall_inject.h"

/* The x86-64 ABI lets a leaf function keep data in the 128 bytes below its
 * SP; what lies below that is dead (a signal frame would overwrite it). */
#define RED_ZONE 128
#define OLD_WORDS 3 /* stack_t: ss_sp, ss_flags (and padding), ss_size */

static const char *seccomp_refuses(pid_t pid, pid_t tid, uint64_t old) {
  int mode = ur_seccomp_mode(pid, tid);
  if (mode < 0) return "its status cannot be read";
  if (mode == 0) return "";
  if (mode == 1) return "it runs in seccomp's strict mode";
  const uint64_t args[UR_SECCOMP_ARGS_KNOWN] = {0, old, 0, 0, 0};
  int ok = ur_seccomp_allows_known(tid, SYS_sigaltstack, args, 0x1f, true);
  if (ok < 0) return "its seccomp filter cannot be read";
  return ok ? "" : "its seccomp filter does not provably allow sigaltstack()";
}

/* The words at `at` (in one page): one process_vm_readv, which costs a
 * third of the ptrace calls word by word, those where it is refused. */
static bool peek(pid_t tid, uint64_t at, uint64_t w[OLD_WORDS]) {
  struct iovec local = {w, 8u * OLD_WORDS}, remote = {(void *)at, 8u * OLD_WORDS};
  if (process_vm_readv(tid, &local, 1, &remote, 1, 0) == (ssize_t)(8u * OLD_WORDS)) return true;
  for (int i = 0; i < OLD_WORDS; i++) {
    errno = 0;
    long v = ptrace(PTRACE_PEEKDATA, tid, (void *)(at + 8u * (unsigned)i), NULL);
    if (errno) return false;
    w[i] = (uint64_t)v;
  }
  return true;
}

/* Put back the words w when any differs from now (all when now is
 * unknown): one process_vm_writev, else the forced writes of
 * PTRACE_POKEDATA, word by word. */
static void poke(pid_t tid, uint64_t at, const uint64_t w[OLD_WORDS], const uint64_t *now) {
  if (now && memcmp(now, w, 8u * OLD_WORDS) == 0) return;
  struct iovec local = {(void *)w, 8u * OLD_WORDS}, remote = {(void *)at, 8u * OLD_WORDS};
  if (process_vm_writev(tid, &local, 1, &remote, 1, 0) == (ssize_t)(8u * OLD_WORDS)) return;
  for (int i = 0; i < OLD_WORDS; i++)
    if (!now || now[i] != w[i])
      ptrace(PTRACE_POKEDATA, tid, (void *)(at + 8u * (unsigned)i), (void *)w[i]);
}

/* One thread's query: where its answer goes, and the words there before. */
struct query {
  struct ur_injection j;
  uint64_t old, saved[OLD_WORDS];
  unsigned batch; /* asked with the others of its batch */
  bool began;
};

/* The injected call put in place in t, its answer's words saved first;
 * false with *why set when t cannot be asked. */
static bool begin(struct ur_capture *c, struct ur_thread *t, uint64_t ip, struct query *q,
                  const char **why) {
  if (!t->attached || t->running || t->group_stop || t->resume_sig) {
    *why = "a thread was taking a signal or in a group stop";
    return false;
  }
  if (*(*why = seccomp_refuses(c->pid, t->tid, q->old))) return false;
  if (!peek(t->tid, q->old, q->saved)) {
    *why = "the stack below a thread's SP cannot be read";
    return false;
  }
  const uint64_t a[5] = {0, q->old, 0, 0, 0};
  ur_inject_begin(&q->j, t, ip, SYS_sigaltstack, a, false);
  q->began = true;
  return true;
}

/* The answer of a query the thread is back from into *s, its registers and
 * the words it answered in put back: 1 with a stack, 0 without (or gone),
 * -1 with *why set. */
static int answer(struct query *q, struct ur_signal_stack *s, const char **why) {
  long rc = ur_inject_end(&q->j);
  int fail = q->j.fail;
  pid_t tid = q->j.t->tid;
  if (fail == -ESRCH) return 0; /* exited: its stack is nobody's root */
  uint64_t got[OLD_WORDS];
  bool read = !fail && rc == 0 && peek(tid, q->old, got);
  /* A failed call wrote nothing (EFAULT on a guard page, which a forced
   * write would fill with a page of its own); else the words it changed. */
  if (fail || rc == 0) poke(tid, q->old, q->saved, read ? got : NULL);
  if (!read) {
    *why = fail || rc ? "the injected sigaltstack() failed" : "the answer could not be read";
    return -1;
  }
  if ((got[1] & SS_DISABLE) || !got[0]) return 0;
  *s = (struct ur_signal_stack){tid, 0, got[0], got[2]};
  return 1;
}

static int by_slot(const void *a, const void *b) {
  const struct query *x = *(struct query *const *)a, *y = *(struct query *const *)b;
  return x->old < y->old ? -1 : x->old > y->old;
}

/* Where each thread's answer goes, 32-byte aligned so the 24 bytes lie in
 * one page (the kernel's write is whole or none). Threads whose words would
 * fall in the same place (stacks a program shares between threads) are
 * asked in batches of their own, one after another: else one's answer would
 * be read as the other's. Returns the number of batches. */
static unsigned place(struct ur_capture *c, struct query *qs) {
  unsigned batches = 1;
  struct query **order = malloc(c->n * sizeof(*order));
  for (size_t i = 0; i < c->n; i++) {
    qs[i].old = (c->threads[i].regs.rsp - RED_ZONE - 8u * OLD_WORDS) & ~UINT64_C(31);
    qs[i].batch = order ? 0 : (unsigned)i; /* no room to sort: one at a time */
    if (order) order[i] = &qs[i];
  }
  if (!order) return (unsigned)c->n;
  qsort(order, c->n, sizeof(*order), by_slot);
  for (size_t i = 1; i < c->n; i++)
    if (order[i]->old == order[i - 1]->old) {
      order[i]->batch = order[i - 1]->batch + 1;
      if (order[i]->batch >= batches) batches = order[i]->batch + 1;
    }
  free(order);
  return batches;
}

/* One call's asking of every thread, and what it found. */
struct asking {
  struct ur_capture *c;
  uint64_t ip;
  void (*hold)(const char *step);
  struct query *qs;
  struct ur_signal_stack *out;
  size_t nout, unread;
  char *why;
  size_t why_len;
};

static void unread(struct asking *k, const char *reason) {
  if (k->unread++ == 0 && k->why_len) snprintf(k->why, k->why_len, "%s", reason);
}

/* Every thread of batch b asked at once: each is given the call, all run
 * to it, then all run back from it, and each is read and put back.
 * hold("sigaltstack") sees every one inside the call. */
static void ask_batch(struct asking *k, unsigned b) {
  struct query *qs = k->qs;
  size_t n = k->c->n;
  bool any = false;
  for (size_t i = 0; i < n; i++) {
    const char *reason = "";
    if (qs[i].batch != b) continue;
    if (begin(k->c, &k->c->threads[i], k->ip, &qs[i], &reason)) any = true;
    else unread(k, reason);
  }
  for (int stops = 1; any && stops <= 2; stops++) {
    /* All resumed before any is waited for: they run to the call and back
     * side by side, on as many cores as there are. */
    for (size_t i = 0; i < n; i++)
      if (qs[i].batch == b && qs[i].began) ur_inject_resume(&qs[i].j);
    for (size_t i = 0; i < n; i++)
      if (qs[i].batch == b && qs[i].began) ur_inject_wait(&qs[i].j, stops, NULL);
    if (stops == 1 && k->hold) k->hold("sigaltstack");
  }
  for (size_t i = 0; i < n; i++) {
    const char *reason = "";
    if (qs[i].batch != b || !qs[i].began) continue;
    int got = answer(&qs[i], &k->out[k->nout], &reason);
    if (got > 0) k->nout++;
    if (got < 0) unread(k, reason);
  }
}

size_t ur_query_signal_stacks(struct ur_capture *c, uint64_t ip, void (*hold)(const char *step),
                              struct ur_signal_stack *out, size_t *nout, char *why,
                              size_t why_len) {
  struct asking k = {c, ip, hold, NULL, out, 0, 0, why, why_len};
  *nout = 0;
  if (why_len) why[0] = 0;
  if (!(k.qs = calloc(c->n ? c->n : 1, sizeof(*k.qs)))) {
    if (why_len) snprintf(why, why_len, "out of memory");
    return c->n;
  }
  unsigned batches = place(c, k.qs);
  for (unsigned b = 0; b < batches; b++) ask_batch(&k, b);
  free(k.qs);
  *nout = k.nout;
  return k.unread;
}
