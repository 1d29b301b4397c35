#include "work_pool.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "raw_syscall.h"

static void relax(unsigned *spins) {
  if (++*spins < 64) {
#if defined(__x86_64__)
    __asm__ volatile("pause");
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
  } else {
    ur_sys0(SYS_sched_yield); /* a marking thread may have been preempted */
  }
}

static void lock(struct ur_work_pool *p) {
  unsigned spins = 0;
  while (__atomic_exchange_n(&p->lock, 1, __ATOMIC_ACQUIRE))
    while (__atomic_load_n(&p->lock, __ATOMIC_RELAXED)) relax(&spins);
}

static void unlock(struct ur_work_pool *p) { __atomic_store_n(&p->lock, 0, __ATOMIC_RELEASE); }

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
  unlock(p);
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
    if (p->waiting == p->workers) break; /* everyone is here: nothing can come */
    unlock(p);
    unsigned spins = 0;
    while (!__atomic_load_n(&p->len, __ATOMIC_RELAXED) &&
           __atomic_load_n(&p->waiting, __ATOMIC_RELAXED) !=
               __atomic_load_n(&p->workers, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&p->failed, __ATOMIC_RELAXED))
      relax(&spins);
    lock(p);
  }
  unlock(p);
  return 0;
}

void ur_work_pool_leave(struct ur_work_pool *p) {
  lock(p);
  __atomic_store_n(&p->workers, p->workers - 1, __ATOMIC_RELAXED);
  unlock(p);
}

void ur_work_pool_fail(struct ur_work_pool *p) {
  lock(p);
  __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
  unlock(p);
}
