#include "work_pool.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "raw_syscall.h"

#define SPINS 64    /* pause, then */
#define YIELDS 128  /* sched_yield, then sleep */

static void pause_once(void) {
#if defined(__x86_64__)
  __asm__ volatile("pause");
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static void relax(unsigned *spins) {
  if (++*spins < SPINS) pause_once();
  else ur_sys0(SYS_sched_yield); /* the holder may have been preempted */
}

static void lock(struct ur_work_pool *p) {
  unsigned spins = 0;
  while (__atomic_exchange_n(&p->lock, 1, __ATOMIC_ACQUIRE))
    while (__atomic_load_n(&p->lock, __ATOMIC_RELAXED)) relax(&spins);
}

static void unlock(struct ur_work_pool *p) { __atomic_store_n(&p->lock, 0, __ATOMIC_RELEASE); }

/* Under the lock: something a waiter waits for happened. Sequentially
 * consistent with the look at `sleepers` in wake_sleepers: a waiter counts
 * itself first and then sleeps only while `changes` is what it saw, so
 * either the waker sees the sleeper or the sleeper sees the change. */
static void changed(struct ur_work_pool *p) {
  __atomic_store_n(&p->changes, p->changes + 1, __ATOMIC_SEQ_CST);
}

/* After unlocking: wake the waiters that went to sleep. */
static void wake_sleepers(struct ur_work_pool *p) {
  if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST))
    ur_sys6(SYS_futex, (long)&p->changes, FUTEX_WAKE_PRIVATE, INT32_MAX, 0, 0, 0);
}

static int nothing_to_wait_for(struct ur_work_pool *p) {
  return __atomic_load_n(&p->len, __ATOMIC_RELAXED) ||
         __atomic_load_n(&p->waiting, __ATOMIC_RELAXED) ==
             __atomic_load_n(&p->workers, __ATOMIC_RELAXED) ||
         __atomic_load_n(&p->failed, __ATOMIC_RELAXED);
}

/* Until there is work, or marking is over: spin a little, then sleep on
 * `changes` (seen: its value under the lock, so no change is missed). The
 * timeout is a backstop only. */
static void wait_for_change(struct ur_work_pool *p, uint32_t seen) {
  unsigned spins = 0;
  while (!nothing_to_wait_for(p)) {
    if (spins < SPINS + YIELDS) {
      relax(&spins);
      continue;
    }
    __atomic_fetch_add(&p->sleepers, 1, __ATOMIC_SEQ_CST);
    struct timespec ts = {0, 10 * 1000 * 1000};
    ur_sys6(SYS_futex, (long)&p->changes, FUTEX_WAIT_PRIVATE, seen, (long)&ts, 0, 0);
    __atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
    seen = __atomic_load_n(&p->changes, __ATOMIC_ACQUIRE);
  }
}

void ur_work_pool_init(struct ur_work_pool *p, unsigned workers) {
  memset(p, 0, sizeof(*p));
  p->workers = workers;
}

void ur_work_pool_free(struct ur_work_pool *p) {
  ur_big_free(p->items);
  p->items = NULL;
  p->len = p->cap = 0;
}

int ur_work_pool_give(struct ur_work_pool *p, const uint32_t *items, size_t n) {
  lock(p);
  if (p->len + n > p->cap) {
    size_t cap = p->cap ? p->cap : 4096;
    while (cap < p->len + n) cap *= 2;
    uint32_t *t = ur_big_realloc(p->items, cap * sizeof(*t));
    if (!t) {
      unlock(p);
      return -ENOMEM;
    }
    p->items = t;
    p->cap = cap;
  }
  memcpy(p->items + p->len, items, n * sizeof(*items));
  __atomic_store_n(&p->len, p->len + n, __ATOMIC_RELAXED);
  p->given += n;
  changed(p);
  unlock(p);
  wake_sleepers(p);
  return 0;
}

size_t ur_work_pool_take(struct ur_work_pool *p, uint32_t *out, size_t max) {
  int counted = 0;
  lock(p);
  for (;;) {
    if (p->failed) break;
    if (p->len) {
      /* Half of what is on offer, so a second waiter finds some too. */
      size_t n = p->len > 1 ? p->len / 2 : 1;
      if (n > max) n = max;
      size_t from = p->len - n;
      memcpy(out, p->items + from, n * sizeof(*out));
      __atomic_store_n(&p->len, from, __ATOMIC_RELAXED);
      if (counted) __atomic_store_n(&p->waiting, p->waiting - 1, __ATOMIC_RELAXED);
      unlock(p);
      return n;
    }
    if (!counted) {
      counted = 1;
      __atomic_store_n(&p->waiting, p->waiting + 1, __ATOMIC_RELAXED);
    }
    if (p->waiting == p->workers) { /* everyone is here: nothing can come */
      changed(p);
      break;
    }
    uint32_t seen = p->changes;
    unlock(p);
    wait_for_change(p, seen);
    lock(p);
  }
  unlock(p);
  wake_sleepers(p);
  return 0;
}

void ur_work_pool_leave(struct ur_work_pool *p) {
  lock(p);
  __atomic_store_n(&p->workers, p->workers - 1, __ATOMIC_RELAXED);
  changed(p);
  unlock(p);
  wake_sleepers(p);
}

void ur_work_pool_fail(struct ur_work_pool *p) {
  lock(p);
  __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
  changed(p);
  unlock(p);
  wake_sleepers(p);
}
