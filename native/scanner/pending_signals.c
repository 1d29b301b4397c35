#include "pending_signals.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ptrace.h>

#define BATCH 64 /* siginfo read per PTRACE_PEEKSIGINFO */

struct values {
  uint64_t *v;
  size_t n, cap;
};

static int add(struct values *vs, const siginfo_t *si) {
  if (si->si_code >= 0) return 0; /* the kernel's own: no value given */
  if (vs->n == vs->cap) {
    size_t cap = vs->cap ? vs->cap * 2 : 16;
    uint64_t *v = realloc(vs->v, cap * sizeof(*v));
    if (!v) return -ENOMEM;
    vs->v = v;
    vs->cap = cap;
  }
  vs->v[vs->n++] = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
  return 0;
}

static int peek_queue(pid_t tid, unsigned flags, struct values *vs) {
  siginfo_t batch[BATCH];
  for (uint64_t off = 0;; off += BATCH) {
    struct __ptrace_peeksiginfo_args args = {.off = off, .flags = flags, .nr = BATCH};
    long n = ptrace(PTRACE_PEEKSIGINFO, tid, &args, batch);
    if (n < 0) return -errno;
    for (long i = 0; i < n; i++)
      if (add(vs, &batch[i]) < 0) return -ENOMEM;
    if (n < BATCH) return 0;
  }
}

long ur_pending_signal_values(const struct ur_capture *c, uint64_t **out) {
  struct values vs = {0};
  int shared_done = 0, rc = 0;
  for (size_t i = 0; i < c->n && rc == 0; i++) {
    const struct ur_thread *t = &c->threads[i];
    if (!t->attached || t->running) continue;
    if (!shared_done) shared_done = (rc = peek_queue(t->tid, PTRACE_PEEKSIGINFO_SHARED, &vs)) == 0;
    if (rc == 0) rc = peek_queue(t->tid, 0, &vs);
    siginfo_t si;
    if (rc == 0 && t->resume_sig && ptrace(PTRACE_GETSIGINFO, t->tid, NULL, &si) == 0)
      rc = add(&vs, &si);
    if (rc == -ESRCH) rc = 0; /* died since the stop: its signals went with it */
  }
  if (rc < 0) {
    free(vs.v);
    return rc;
  }
  *out = vs.v;
  return (long)vs.n;
}
