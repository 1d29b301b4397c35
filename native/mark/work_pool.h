/*
 * The work several marking threads share (ur_walker_mark_team). Each thread
 * marks from a stack of its own; one that runs dry waits here (spinning a
 * little, then asleep on a futex: a serial heap such as a long list gives a
 * waiter nothing for the whole mark, and the CPU it would burn is the
 * target's, whose cgroup the snapshot child is in), and a busy one that
 * sees a waiter hands over part of its stack. Marking is over when
 * every thread waits and nothing is left to hand over: only a working thread
 * gives, and a thread only starts to wait after finding the pool empty, so
 * at that point nothing can arrive any more.
 *
 * No libc inside (the snapshot child may not use it): a spin lock, sched_yield
 * by raw system call, memory from alloc.h.
 */
#ifndef UR_MARK_WORK_POOL_H
#define UR_MARK_WORK_POOL_H

#include <stddef.h>
#include <stdint.h>

struct ur_work_pool {
  uint32_t lock;
  uint32_t changes;  /* futex word: bumped when work arrives or marking ends */
  uint32_t sleepers; /* waiters asleep on `changes` */
  unsigned workers; /* threads taking part; final before any of them marks */
  unsigned waiting; /* of them, how many found nothing to do */
  int failed;       /* a thread failed: the others stop at their next wait */
  uint32_t *items;
  size_t len, cap;
  uint64_t given;   /* items handed over in all */
};

void ur_work_pool_init(struct ur_work_pool *p, unsigned workers);
void ur_work_pool_free(struct ur_work_pool *p);

/* Whether a thread is waiting for work and none is on offer (a hint, no lock). */
static inline int ur_work_pool_hungry(const struct ur_work_pool *p) {
  return __atomic_load_n(&p->waiting, __ATOMIC_RELAXED) != 0 &&
         __atomic_load_n(&p->len, __ATOMIC_RELAXED) == 0;
}

/* Hand over n items. Returns 0 or -ENOMEM (then nothing was given). */
int ur_work_pool_give(struct ur_work_pool *p, const uint32_t *items, size_t n);

/* Wait for work: returns how many items (at most max) were taken into out, or
 * 0 when marking is over (or a thread failed). */
size_t ur_work_pool_take(struct ur_work_pool *p, uint32_t *out, size_t max);

/* One of the workers counted at init will not take part after all (it
 * could not be started); only before any of them can have finished. */
void ur_work_pool_leave(struct ur_work_pool *p);

/* A thread that fails stops taking part: the others must not wait for it. */
void ur_work_pool_fail(struct ur_work_pool *p);

#endif
