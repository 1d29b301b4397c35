#include "stacks.h"

#include <string.h>

#include "lock.h"
#include "modules.h"
#include "region.h"

/* Open addressing over the ids, kept at most half full: when it would pass
 * that, a table twice as large is built beside it and published with one
 * store. A lookup still probing the old one finds every id it held; one it
 * misses is looked up again under the lock. */
struct stack_index {
  uint64_t mask;
  uint32_t slot[]; /* hash slot -> id (0 empty) */
};

static struct {
  struct stack_index *index;
  int fixed; /* the table grows no more (ur_stacks_stop_growing) */
  uint64_t *hashes[UR_STACK_SEGMENTS]; /* per id, to reject most mismatches without comparing frames */
  uint64_t frames[UR_STACK_SEGMENTS];  /* ur_stack_table.frames: each segment's frames */
  uint64_t counts[UR_STACK_SEGMENTS];  /* ur_stack_table.frame_counts */
} st;

static inline uint32_t offset_in_segment(uint32_t id, uint32_t k) {
  return id - ur_stack_segment_base(k);
}

/* A published id's frames, count and hash (its segment was made before). */
static inline uint64_t *frames_of(uint32_t id, uint32_t max_frames) {
  uint32_t k = ur_stack_segment(id);
  uint64_t *f = (uint64_t *)(uintptr_t)__atomic_load_n(&st.frames[k], __ATOMIC_ACQUIRE);
  return f + (uint64_t)offset_in_segment(id, k) * max_frames;
}

static inline uint16_t *count_of(uint32_t id) {
  uint32_t k = ur_stack_segment(id);
  uint16_t *c = (uint16_t *)(uintptr_t)__atomic_load_n(&st.counts[k], __ATOMIC_ACQUIRE);
  return c + offset_in_segment(id, k);
}

static inline uint64_t *hash_of(uint32_t id) {
  uint32_t k = ur_stack_segment(id);
  return __atomic_load_n(&st.hashes[k], __ATOMIC_ACQUIRE) + offset_in_segment(id, k);
}

/* Segment k's frames, counts and hashes, as one piece of the region (so a
 * failure leaves nothing half made). Under the table's lock. */
static int add_segment(uint32_t k, const struct ur_stack_table *t) {
  uint64_t ids = ur_stack_segment_ids(k), room = t->capacity - ur_stack_segment_base(k);
  if (ids > room) ids = room;
  size_t frames = (size_t)ids * t->max_frames * sizeof(uint64_t);
  size_t hashes = (size_t)ids * sizeof(uint64_t);
  char *p = ur_region_alloc(frames + hashes + (size_t)ids * sizeof(uint16_t));
  if (!p) return -1;
  __atomic_store_n(&st.hashes[k], (uint64_t *)(void *)(p + frames), __ATOMIC_RELEASE);
  __atomic_store_n(&st.counts[k], (uint64_t)(uintptr_t)(p + frames + hashes), __ATOMIC_RELEASE);
  __atomic_store_n(&st.frames[k], (uint64_t)(uintptr_t)p, __ATOMIC_RELEASE);
  return 0;
}

static struct stack_index *new_index(uint64_t slots) {
  struct stack_index *ix = ur_region_alloc(sizeof *ix + slots * sizeof(uint32_t));
  if (ix) ix->mask = slots - 1;
  return ix;
}

static void index_put(struct stack_index *ix, uint32_t id, uint64_t h) {
  uint64_t i = h & ix->mask;
  while (ix->slot[i]) i = (i + 1) & ix->mask;
  __atomic_store_n(&ix->slot[i], id, __ATOMIC_RELEASE);
}

/* Under the table's lock: a table twice as large with ids [1, count). The
 * old one stays where it is (the region never takes memory back), for
 * lookups that loaded it before. */
static int grow_index(uint32_t count) {
  struct stack_index *ix = new_index((st.index->mask + 1) * 2);
  if (!ix) return -1;
  for (uint32_t id = 1; id < count; id++) index_put(ix, id, *hash_of(id));
  __atomic_store_n(&st.index, ix, __ATOMIC_RELEASE);
  return 0;
}

int ur_stacks_init(uint32_t capacity, uint32_t max_frames) {
  struct ur_stack_table *t = ur_region_alloc(sizeof *t);
  if (!t) return -1;
  ur_g.stacks = t;
  t->count = 1; /* id 0 means "no backtrace" */
  if (!max_frames) return 0;
  t->capacity = capacity;
  t->max_frames = max_frames;
  st.index = new_index((uint64_t)ur_stack_segment_ids(0) * 2);
  if (!st.index || add_segment(0, t)) return -1;
  t->frames = (uint64_t)(uintptr_t)st.frames;
  t->frame_counts = (uint64_t)(uintptr_t)st.counts;
  return 0;
}

static uint64_t hash_frames(const uintptr_t *f, uint32_t n) {
  uint64_t h = UINT64_C(0xcbf29ce484222325) ^ n;
  for (uint32_t i = 0; i < n; i++) {
    h ^= f[i];
    h *= UINT64_C(0x9E3779B97F4A7C15);
    h ^= h >> 29;
  }
  return h | 1; /* never 0, so a zeroed hashes[] entry cannot match */
}

static int same(uint32_t id, const uintptr_t *f, uint32_t n, uint64_t h) {
  const struct ur_stack_table *t = ur_g.stacks;
  return *hash_of(id) == h && *count_of(id) == n &&
         memcmp(frames_of(id, t->max_frames), f, n * sizeof *f) == 0;
}

/* Probe for the stack; returns its id, or 0 at the first empty slot. */
static uint32_t probe(const struct stack_index *ix, const uintptr_t *f, uint32_t n, uint64_t h) {
  for (uint64_t i = h & ix->mask;; i = (i + 1) & ix->mask) {
    uint32_t id = __atomic_load_n(&ix->slot[i], __ATOMIC_ACQUIRE);
    if (id == 0) return 0;
    if (same(id, f, n, h)) return id;
  }
}

/* The last stack this thread interned: allocations come in runs from one
 * site, and comparing with it is cheaper than hashing and probing. Ids are
 * never reused, so a remembered one stays right. */
#define LAST_MAX 32
static __thread struct {
  uint32_t id, n;
  uintptr_t f[LAST_MAX];
  uint32_t adding; /* inside add(): a signal handler's call here adds nothing */
} last __attribute__((tls_model("initial-exec")));

static inline int same_as_last(const uintptr_t *f, uint32_t n) {
  if (last.n != n || !last.id) return 0;
  for (uint32_t i = 0; i < n; i++)
    if (last.f[i] != f[i]) return 0;
  return 1;
}

static inline uint32_t remember(const uintptr_t *f, uint32_t n, uint32_t id) {
  if (id && n <= LAST_MAX) {
    memcpy(last.f, f, n * sizeof *f);
    last.n = n;
    last.id = id;
  }
  return id;
}

void ur_stacks_stop_growing(void) { __atomic_store_n(&st.fixed, 1, __ATOMIC_RELAXED); }

/* Room for id `next`: its segment, and an index that stays half empty. */
static int make_room(struct ur_stack_table *t, uint32_t next) {
  uint32_t k = ur_stack_segment(next);
  int missing = !st.frames[k], crowded = (uint64_t)next + 1 > (st.index->mask + 1) / 2;
  if (!missing && !crowded) return 0;
  if (__atomic_load_n(&st.fixed, __ATOMIC_RELAXED)) return -1;
  if (missing && add_segment(k, t)) return -1;
  return crowded ? grow_index(next) : 0;
}

/* Under the table's lock (or alone: one thread, or the one holding every
 * lock): store a new stack, or count it as lost (0). */
static uint32_t add(const uintptr_t *f, uint32_t n, uint64_t h) {
  struct ur_stack_table *t = ur_g.stacks;
  uint32_t id = probe(st.index, f, n, h); /* someone may have added it meanwhile */
  if (id) return id;
  uint32_t next = t->count;
  if (next >= t->capacity || make_room(t, next)) {
    __atomic_fetch_add(&t->overflowed, 1, __ATOMIC_RELAXED);
    return 0;
  }
  memcpy(frames_of(next, t->max_frames), f, n * sizeof *f);
  *count_of(next) = (uint16_t)n;
  *hash_of(next) = h;
  __atomic_store_n(&t->count, next + 1, __ATOMIC_RELEASE);
  index_put(st.index, next, h);
  return next;
}

uint32_t ur_stacks_intern(const uintptr_t *f, uint32_t n) {
  struct ur_stack_table *t = ur_g.stacks;
  if (!n || !t || !t->max_frames) return 0;
  if (n > t->max_frames) n = t->max_frames;
  if (same_as_last(f, n)) return last.id;
  uint64_t h = hash_frames(f, n);
  uint32_t id = probe(__atomic_load_n(&st.index, __ATOMIC_ACQUIRE), f, n, h);
  if (id) return remember(f, n, id);
  /* A signal handler's call landing inside this thread's add() would take
   * the lock as its own and write the same id or segment. */
  if (last.adding) {
    __atomic_fetch_add(&t->overflowed, 1, __ATOMIC_RELAXED);
    return 0;
  }
  ur_modules_note(); /* its pcs' objects, while they are loaded */
  last.adding = 1;
  __atomic_signal_fence(__ATOMIC_SEQ_CST); /* set before add() begins, for a handler */
  int locked = ur_lock(&ur_fork->stacks_lock, ur_tls.tid);
  id = add(f, n, h);
  ur_unlock(&ur_fork->stacks_lock, locked);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  last.adding = 0;
  return remember(f, n, id);
}

size_t ur_stacks_get(uint32_t id, uintptr_t *out, size_t max) {
  const struct ur_stack_table *t = ur_g.stacks;
  if (!t || id == 0 || id >= __atomic_load_n(&t->count, __ATOMIC_ACQUIRE)) return 0;
  size_t n = *count_of(id);
  if (n > max) n = max;
  memcpy(out, frames_of(id, t->max_frames), n * sizeof *out);
  return n;
}

const uint64_t *ur_stacks_frames(uint32_t id, size_t *n) {
  const struct ur_stack_table *t = ur_g.stacks;
  if (!t || id == 0 || id >= __atomic_load_n(&t->count, __ATOMIC_ACQUIRE)) {
    *n = 0;
    return NULL;
  }
  *n = *count_of(id);
  return frames_of(id, t->max_frames);
}

void ur_stacks_lock(uint32_t tid) { ur_lock_hard(&ur_fork->stacks_lock, tid); }
void ur_stacks_unlock(void) { ur_unlock(&ur_fork->stacks_lock, 1); }
void ur_stacks_reset_lock(uint32_t owner_tid) {
  ur_fork->stacks_lock = owner_tid;
}
