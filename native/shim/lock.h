/*
 * The futex locks of the shards, the stack table, the region and the
 * shim's other mutual exclusions. A lock's word is its holder's tid (0:
 * free), | UR_TID_LOCK_WAITERS once a thread waits for it: taking the lock
 * and naming its holder are one compare-and-swap, and releasing it and
 * unnaming it one exchange. So a signal handler's call, landing on the
 * holder's thread at any instruction, finds its own tid there, and the
 * locks a handler may meet while its thread holds them (ur_lock,
 * ur_tid_lock) return 0 instead of waiting on their own thread for ever;
 * the caller does without the lock (docs/shim.md).
 *
 * A thread that holds every lock on behalf of everyone (malloc_disable, or
 * fork between prepare and parent/child) must still be able to allocate, so
 * ur_lock() returns 0 without locking when the lock is busy and the caller is
 * ur_fork->excl_tid; the caller passes that result back to ur_unlock().
 */
#ifndef UR_LOCK_H
#define UR_LOCK_H

#include <errno.h>
#include <sched.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "state.h"

static inline long ur_futex(uint32_t *word, int op, uint32_t val) {
  return syscall(SYS_futex, word, op, val, NULL, NULL, 0);
}

#define UR_TURN_YIELDS 64u
#define UR_TURN_NAP_MIN_NS 62500L
#define UR_TURN_NAP_MAX_NS 1000000L

/* Between two looks at something another thread is to finish (a call, a
 * set*id(), an update of a shard or a record), *looks counting them from
 * 0: such work ends within microseconds, so the first looks only yield the
 * core. One that lasts past them has its thread held (stopped by a
 * debugger or a scanner, waiting in a page fault, in a signal handler that
 * blocks): the waiter, the helper among them, then sleeps between looks,
 * up to a millisecond, instead of spinning on a core for as long. */
static inline void ur_wait_a_turn(unsigned *looks) {
  if (++*looks <= UR_TURN_YIELDS) {
    sched_yield();
    return;
  }
  unsigned naps = *looks - UR_TURN_YIELDS - 1;
  long ns = naps >= 4 ? UR_TURN_NAP_MAX_NS : UR_TURN_NAP_MIN_NS << naps;
  struct timespec ts = {0, ns};
  /* The system call, not nanosleep(): no cancellation point inside the
   * allocator (malloc_disable runs on the program's threads too). */
  int saved = errno;
  syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, NULL);
  errno = saved;
}

#define UR_TID_LOCK_WAITERS 0x80000000u

/* The holder's tid, 0 if the lock is free. */
static inline uint32_t ur_lock_holder(uint32_t *lock) {
  return ur_load32(lock) & ~UR_TID_LOCK_WAITERS;
}

/* The contended path: wait until the lock is free and take it. Returns 0
 * without it when mine_ok and its holder is tid (a handler's call nested in
 * its own thread's hold). A thread that has waited takes the lock marked
 * with waiters, as others may still sleep: each release wakes one. */
static inline int ur_lock_wait(uint32_t *lock, uint32_t tid, int mine_ok) {
  int saved = errno; /* malloc must not leak EAGAIN/EINTR from our bookkeeping */
  uint32_t c = ur_load32(lock), want = tid;
  for (;;) {
    if (c == 0) {
      if (__atomic_compare_exchange_n(lock, &c, want, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        break;
      continue;
    }
    if (mine_ok && (c & ~UR_TID_LOCK_WAITERS) == tid) {
      errno = saved;
      return 0;
    }
    if (!(c & UR_TID_LOCK_WAITERS) &&
        !__atomic_compare_exchange_n(lock, &c, c | UR_TID_LOCK_WAITERS, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
      continue;
    ur_futex(lock, FUTEX_WAIT_PRIVATE, c | UR_TID_LOCK_WAITERS);
    want = tid | UR_TID_LOCK_WAITERS;
    c = ur_load32(lock);
  }
  errno = saved;
  return 1;
}

/* tid: the caller's, never 0 (ur_tls.tid is set before any call reaches
 * the registry: entry.c). */
static inline int ur_lock(uint32_t *lock, uint32_t tid) {
  if (ur_load32(&ur_g.slow) & UR_SLOW_SINGLE) return 0; /* nobody to exclude */
  uint32_t c = 0;
  if (UR_UNLIKELY(!__atomic_compare_exchange_n(lock, &c, tid, 0, __ATOMIC_ACQUIRE,
                                               __ATOMIC_RELAXED))) {
    uint32_t excl = ur_load32(&ur_fork->excl_tid);
    if (excl != 0 && excl == tid) return 0;
    /* Held by this very thread: a signal handler's malloc or free landed
     * while the thread was inside the registry. The nested call runs on
     * unlocked instead (registry.c defers what it would change there). */
    return ur_lock_wait(lock, tid, 1);
  }
  return 1;
}

static inline void ur_unlock(uint32_t *lock, int locked) {
  if (!locked) return;
  if (UR_UNLIKELY(__atomic_exchange_n(lock, 0, __ATOMIC_RELEASE) & UR_TID_LOCK_WAITERS)) {
    int saved = errno;
    ur_futex(lock, FUTEX_WAKE_PRIVATE, 1);
    errno = saved;
  }
}

/* For locks a handler may meet while its own thread holds them, with no
 * thread holding every lock to let through: 0 instead of waiting on itself,
 * and the caller does without. */
static inline int ur_tid_lock(uint32_t *lock, uint32_t tid) {
  uint32_t c = 0;
  if (UR_LIKELY(__atomic_compare_exchange_n(lock, &c, tid, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)))
    return 1;
  return ur_lock_wait(lock, tid, 1);
}

static inline void ur_tid_unlock(uint32_t *lock) { ur_unlock(lock, 1); }

/* Unconditional variant for code that must own the lock (disable, fork). */
static inline void ur_lock_hard(uint32_t *lock, uint32_t tid) {
  uint32_t c = 0;
  if (!__atomic_compare_exchange_n(lock, &c, tid, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    ur_lock_wait(lock, tid, 0);
}

#endif
