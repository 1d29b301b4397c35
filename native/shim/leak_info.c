/*
 * The allocator interface libmemunreachable needs (malloc_iterate,
 * malloc_disable/enable, malloc_backtrace) and malloc_debug's leak info,
 * answered from the registry.
 */
#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helper.h"
#include "lock.h"
#include "registry.h"
#include "shim.h"
#include "stacks.h"
#include "state.h"
#include "syms.h"
#include "threads.h"
#include "unreachable/malloc_debug.h"

static int ready(void) {
  if (ur_load32(&ur_g.slow) & UR_SLOW_UNINIT) ur_init();
  if (ur_load32(&ur_g.slow) & (UR_SLOW_UNINIT | UR_SLOW_INERT)) return 0;
  ur_go_multi(); /* we are about to read the registry from this thread */
  return 1;
}

/* Scratch memory that never comes from malloc (and so never shows up in the
 * registry or re-enters the shim). */
static void *scratch(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

struct block {
  uint64_t key; /* mangled, as in the registry */
  uint64_t size;
};

struct copy_ctx {
  struct block *buf;
  size_t n, cap;
  uint64_t lo, hi;
};

static void copy_one(uint64_t key, uint64_t size, uint32_t stack_id, void *arg) {
  (void)stack_id;
  struct copy_ctx *c = arg;
  uint64_t p = UR_UNMANGLE(key);
  if (p < c->lo || p >= c->hi || ur_helper_owns(key)) return; /* the helper's, not the program's */
  if (c->n < c->cap) c->buf[c->n] = (struct block){key, size};
  c->n++; /* counted even without room, so the caller can grow and retry */
}

/* Room for want entries in c's scratch memory; 0 when there is none. */
static int grow(struct copy_ctx *c, size_t want) {
  if (c->buf) munmap(c->buf, c->cap * sizeof *c->buf);
  c->cap = want * 2;
  c->buf = scratch(c->cap * sizeof *c->buf);
  if (!c->buf) c->cap = 0;
  return c->buf != NULL;
}

/* One part of the registry (a shard, or with shard == UR_NUM_SHARDS the
 * size maps) handed to cb: its matches are copied first, without allocating
 * (a shard's lock may be held), then cb runs with no lock held, so it may
 * allocate. */
static void iterate_part(struct copy_ctx *c, unsigned shard, int lock,
                         void (*cb)(uintptr_t ptr, size_t size, void *arg), void *arg) {
  size_t want = shard < UR_NUM_SHARDS ? (size_t)ur_registry_shard_count(shard) : 0;
  for (;;) {
    if (want > c->cap && !grow(c, want)) return; /* no memory: nothing to hand over */
    c->n = 0;
    if (shard < UR_NUM_SHARDS) ur_registry_foreach_in_shard(shard, lock, copy_one, c);
    else ur_size_maps_foreach(c->lo, c->hi, copy_one, c);
    if (c->n <= c->cap) break;
    want = c->n; /* it grew meanwhile: again, with room */
  }
  for (size_t j = 0; j < c->n; j++) cb(UR_UNMANGLE(c->buf[j].key), c->buf[j].size, arg);
}

UR_EXPORT int malloc_iterate(uintptr_t base, size_t size,
                             void (*cb)(uintptr_t ptr, size_t size, void *arg), void *arg) {
  if (!ready()) return -1;
  struct copy_ctx c = {NULL, 0, 0, base, base + size < base ? UINT64_MAX : base + size};
  /* Disabled: nothing moves, and the shard locks are ours already. */
  int lock = (ur_load32(&ur_g.slow) & UR_SLOW_GATE) == 0;
  for (unsigned i = 0; i <= UR_NUM_SHARDS; i++) iterate_part(&c, i, lock, cb, arg);
  if (c.buf) munmap(c.buf, c.cap * sizeof *c.buf);
  return 0;
}

UR_EXPORT void malloc_disable(void) {
  if (!ready()) return;
  uint32_t tid = ur_self_tid();
  if (ur_lock_holder(&ur_g.disable_lock) == tid) {
    ur_g.disable_depth++;
    return;
  }
  ur_lock_hard(&ur_g.disable_lock, tid);
  ur_g.disable_depth = 1;
  __atomic_store_n(&ur_fork->excl_tid, tid, __ATOMIC_SEQ_CST);
  __atomic_fetch_or(&ur_g.slow, UR_SLOW_GATE, __ATOMIC_SEQ_CST);
  /* Entry points announce, then read the gate, with no fence between; this
   * barrier on every running thread makes one of the two sides see the other. */
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  ur_threads_wait_quiescent();
  ur_registry_lock_all(tid);
  ur_stacks_lock(tid);
}

UR_EXPORT void malloc_enable(void) {
  if (!ready()) return;
  uint32_t tid = ur_self_tid();
  if (ur_lock_holder(&ur_g.disable_lock) != tid) return;
  if (--ur_g.disable_depth > 0) return;
  ur_stacks_unlock();
  ur_registry_unlock_all();
  __atomic_store_n(&ur_fork->excl_tid, 0, __ATOMIC_SEQ_CST);
  __atomic_fetch_and(&ur_g.slow, ~UR_SLOW_GATE, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &ur_g.slow, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
  ur_unlock(&ur_g.disable_lock, 1);
}

UR_EXPORT ssize_t malloc_backtrace(void *ptr, uintptr_t *frames, size_t max) {
  if (!ready() || !ur_g.bt_frames) return 0;
  uint64_t size;
  uint32_t id;
  if (!ur_registry_find(ptr, &size, &id)) return 0;
  return (ssize_t)ur_stacks_get(id, frames, max);
}

struct leak_rec {
  uint64_t size;
  uint32_t id;
};

static int rec_before(const struct leak_rec *a, const struct leak_rec *b) {
  /* bionic's order: larger sizes first, then by backtrace */
  return a->size != b->size ? a->size > b->size : a->id < b->id;
}

/* Heapsort: no allocation, no recursion, O(n log n) for any n. */
static void sift(struct leak_rec *r, size_t i, size_t n) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && rec_before(&r[c], &r[c + 1])) c++;
    if (!rec_before(&r[i], &r[c])) return;
    struct leak_rec t = r[i];
    r[i] = r[c];
    r[c] = t;
    i = c;
  }
}

static void sort_recs(struct leak_rec *r, size_t n) {
  for (size_t i = n / 2; i-- > 0;) sift(r, i, n);
  for (size_t end = n; end-- > 1;) {
    struct leak_rec t = r[0];
    r[0] = r[end];
    r[end] = t;
    sift(r, 0, end);
  }
}

struct leak_ctx {
  struct leak_rec *recs;
  size_t n, cap;
  uint64_t mem;
};

static void leak_one(uint64_t key, uint64_t size, uint32_t stack_id, void *arg) {
  (void)key;
  struct leak_ctx *c = arg;
  if (c->n >= c->cap) return;
  c->recs[c->n].size = size;
  c->recs[c->n].id = stack_id;
  c->mem += size;
  c->n++;
}

UR_EXPORT void get_malloc_leak_info(uint8_t **info, size_t *overall_size, size_t *info_size,
                                    size_t *total_memory, size_t *backtrace_size) {
  if (!info || !overall_size || !info_size || !total_memory || !backtrace_size) return;
  *info = NULL;
  *overall_size = *info_size = *total_memory = *backtrace_size = 0;
  if (!ready() || !ur_g.bt_frames) return;

  malloc_disable(); /* one consistent set across all shards */
  size_t total = (size_t)ur_registry_count();
  struct leak_ctx c = {NULL, 0, total ? total : 1, 0};
  c.recs = scratch(c.cap * sizeof *c.recs);
  if (c.recs) ur_registry_foreach(0, leak_one, &c); /* disabled: nothing moves */
  struct leak_rec *recs = c.recs;
  size_t n = c.n, cap = c.cap;
  uint64_t mem = c.mem;
  malloc_enable();
  if (!recs) return;

  sort_recs(recs, n);
  size_t frames = ur_g.bt_frames, unique = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || recs[i].size != recs[i - 1].size || recs[i].id != recs[i - 1].id) unique++;
  size_t rec_bytes = (2 + frames) * sizeof(uintptr_t);
  uint8_t *out = unique ? ur_libc.calloc(unique, rec_bytes) : NULL; /* untracked on purpose */
  if (out) {
    size_t *w = NULL;
    for (size_t i = 0; i < n; i++) {
      if (i == 0 || recs[i].size != recs[i - 1].size || recs[i].id != recs[i - 1].id) {
        w = w ? (size_t *)((uint8_t *)w + rec_bytes) : (size_t *)out;
        w[0] = recs[i].size;
        ur_stacks_get(recs[i].id, (uintptr_t *)&w[2], frames);
      }
      w[1]++;
    }
    *info = out;
    *overall_size = unique * rec_bytes;
  }
  *info_size = rec_bytes;
  *total_memory = mem;
  *backtrace_size = frames;
  munmap(recs, cap * sizeof *recs);
}

UR_EXPORT void free_malloc_leak_info(uint8_t *info) { ur_libc.free(info); }
