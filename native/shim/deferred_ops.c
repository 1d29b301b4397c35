#include "deferred_ops.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

__thread struct ur_deferred_ops ur_deferred __attribute__((tls_model("initial-exec")));

#define FIRST_MORE 256 /* entries: one page */

static void block_signals(sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, old);
}

static struct ur_deferred_op *ops(void) { return ur_deferred.more ? ur_deferred.more : ur_deferred.op; }

static uint32_t capacity(void) { return ur_deferred.more ? ur_deferred.cap : UR_DEFER_INLINE; }

/* Signals blocked. */
static int grow(void) {
  uint32_t cap = capacity() < FIRST_MORE ? FIRST_MORE : capacity() * 2;
  struct ur_deferred_op *m = mmap(NULL, (size_t)cap * sizeof *m, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -1;
  memcpy(m, ops(), (size_t)ur_deferred.n * sizeof *m);
  if (ur_deferred.more) munmap(ur_deferred.more, (size_t)ur_deferred.cap * sizeof *m);
  ur_deferred.more = m;
  ur_deferred.cap = cap;
  return 0;
}

int ur_deferred_add(uint64_t key, uint64_t meta) {
  sigset_t old;
  block_signals(&old);
  int ok = ur_deferred.n < capacity() || grow() == 0;
  if (ok) {
    ops()[ur_deferred.n] = (struct ur_deferred_op){key, meta};
    ur_deferred.n++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return ok ? 0 : -1;
}

int ur_deferred_take(int (*wanted)(uint64_t key, void *arg), void *arg, uint64_t *key,
                     uint64_t *meta) {
  if (!__atomic_load_n(&ur_deferred.n, __ATOMIC_RELAXED)) return 0;
  sigset_t old;
  block_signals(&old);
  struct ur_deferred_op *o = ops();
  uint32_t n = ur_deferred.n, i = 0;
  while (i < n && !wanted(o[i].key, arg)) i++;
  int found = i < n;
  if (found) {
    *key = o[i].key;
    *meta = o[i].meta;
    memmove(&o[i], &o[i + 1], (size_t)(n - i - 1) * sizeof *o);
    ur_deferred.n = --n;
  }
  if (n == 0 && ur_deferred.more) { /* back to the thread's own room */
    munmap(ur_deferred.more, (size_t)ur_deferred.cap * sizeof *o);
    ur_deferred.more = NULL;
    ur_deferred.cap = 0;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return found;
}

int ur_deferred_key(uint32_t i, uint64_t *key) {
  /* The thread's own room may be read as is: an update a nested handler's
   * call took off meanwhile leaves a stale key there, which takes nothing
   * its caller did not ask for. Memory past it may be unmapped meanwhile. */
  if (!__atomic_load_n(&ur_deferred.more, __ATOMIC_RELAXED)) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (i >= __atomic_load_n(&ur_deferred.n, __ATOMIC_RELAXED) || i >= UR_DEFER_INLINE) return 0;
    *key = __atomic_load_n(&ur_deferred.op[i].key, __ATOMIC_RELAXED);
    return 1;
  }
  sigset_t old;
  block_signals(&old);
  int in = i < ur_deferred.n;
  if (in) *key = ops()[i].key;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return in;
}
