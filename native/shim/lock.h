/*
 * The futex mutex used for shards and the stack table: 0 unlocked, 1 locked,
 * 2 locked with waiters (the protocol abi.h documents for ur_shard.lock).
 *
 * A thread that holds every lock on behalf of everyone (malloc_disable, or
 * fork between prepare and parent/child) must still be able to allocate, so
 * ur_lock() returns 0 without locking when the lock is busy and the caller is
 * ur_g.excl_tid; the caller passes that result back to ur_unlock().
 */
#ifndef UR_LOCK_H
#define UR_LOCK_H

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "state.h"

static inline long ur_futex(uint32_t *word, int op, uint32_t val) {
  return syscall(SYS_futex, word, op, val, NULL, NULL, 0);
}

static inline void ur_lock_wait(uint32_t *lock) {
  int saved = errno; /* malloc must not leak EAGAIN/EINTR from our bookkeeping */
  uint32_t c = __atomic_exchange_n(lock, 2, __ATOMIC_ACQUIRE);
  while (c != 0) {
    ur_futex(lock, FUTEX_WAIT_PRIVATE, 2);
    c = __atomic_exchange_n(lock, 2, __ATOMIC_ACQUIRE);
  }
  errno = saved;
}

static inline int ur_lock(uint32_t *lock, uint32_t *owner, uint32_t tid) {
  if (ur_load32(&ur_g.slow) & UR_SLOW_SINGLE) return 0; /* nobody to exclude */
  uint32_t c = 0;
  if (UR_UNLIKELY(!__atomic_compare_exchange_n(lock, &c, 1, 0, __ATOMIC_ACQUIRE,
                                               __ATOMIC_RELAXED))) {
    uint32_t excl = ur_load32(&ur_g.excl_tid);
    if (excl != 0 && excl == tid) return 0;
    /* Held by this very thread: a signal handler's malloc or free landed
     * while the thread was inside the registry. Waiting would never end;
     * the nested call runs on unlocked instead (docs/design.md). */
    if (tid != 0 && ur_load32(owner) == tid) return 0;
    ur_lock_wait(lock);
  }
  __atomic_store_n(owner, tid, __ATOMIC_RELAXED);
  return 1;
}

static inline void ur_unlock(uint32_t *lock, uint32_t *owner, int locked) {
  if (!locked) return;
  __atomic_store_n(owner, 0, __ATOMIC_RELAXED);
  if (UR_UNLIKELY(__atomic_exchange_n(lock, 0, __ATOMIC_RELEASE) == 2)) {
    int saved = errno;
    ur_futex(lock, FUTEX_WAKE_PRIVATE, 1);
    errno = saved;
  }
}

/* A lock whose word is the holder's tid (| UR_TID_LOCK_WAITERS), for locks
 * a signal handler may meet while its own thread holds them: ur_tid_lock
 * returns 0 instead of waiting on itself, and the caller does without. */
#define UR_TID_LOCK_WAITERS 0x80000000u
static inline int ur_tid_lock(uint32_t *lock, uint32_t tid) {
  uint32_t c = 0;
  while (!__atomic_compare_exchange_n(lock, &c, tid, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
    if ((c & ~UR_TID_LOCK_WAITERS) == tid) return 0;
    if ((c & UR_TID_LOCK_WAITERS) ||
        __atomic_compare_exchange_n(lock, &c, c | UR_TID_LOCK_WAITERS, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      int saved = errno;
      ur_futex(lock, FUTEX_WAIT_PRIVATE, c | UR_TID_LOCK_WAITERS);
      errno = saved;
    }
    c = 0;
  }
  return 1;
}

static inline void ur_tid_unlock(uint32_t *lock) {
  if (__atomic_exchange_n(lock, 0, __ATOMIC_RELEASE) & UR_TID_LOCK_WAITERS) {
    int saved = errno;
    ur_futex(lock, FUTEX_WAKE_PRIVATE, INT32_MAX); /* each re-marks the word if it must wait */
    errno = saved;
  }
}

/* Unconditional variants for code that must own the lock (disable, fork). */
static inline void ur_lock_hard(uint32_t *lock, uint32_t *owner, uint32_t tid) {
  uint32_t c = 0;
  if (!__atomic_compare_exchange_n(lock, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    ur_lock_wait(lock);
  __atomic_store_n(owner, tid, __ATOMIC_RELAXED);
}

#endif
