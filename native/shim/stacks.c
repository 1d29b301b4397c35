#include "stacks.h"

#include <string.h>

#include "lock.h"
#include "modules.h"
#include "region.h"

static struct {
  uint32_t *index;   /* open addressing: hash slot -> id (0 empty) */
  uint64_t *hashes;  /* per id, to reject most mismatches without comparing frames */
  uint64_t index_mask;
  uint64_t *frames;
  uint16_t *counts;
} st;

int ur_stacks_init(uint32_t capacity, uint32_t max_frames) {
  struct ur_stack_table *t = ur_region_alloc(sizeof *t);
  if (!t) return -1;
  ur_g.stacks = t;
  t->count = 1; /* id 0 means "no backtrace" */
  if (!max_frames) return 0;
  uint64_t index_size = (uint64_t)capacity * 2;
  st.frames = ur_region_alloc((size_t)capacity * max_frames * sizeof(uint64_t));
  st.counts = ur_region_alloc((size_t)capacity * sizeof(uint16_t));
  st.hashes = ur_region_alloc((size_t)capacity * sizeof(uint64_t));
  st.index = ur_region_alloc(index_size * sizeof(uint32_t));
  if (!st.frames || !st.counts || !st.hashes || !st.index) return -1;
  st.index_mask = index_size - 1;
  t->frames = (uint64_t)(uintptr_t)st.frames;
  t->frame_counts = (uint64_t)(uintptr_t)st.counts;
  t->max_frames = max_frames;
  __atomic_store_n(&t->capacity, capacity, __ATOMIC_RELEASE);
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
  return st.hashes[id] == h && st.counts[id] == n &&
         memcmp(&st.frames[(uint64_t)id * t->max_frames], f, n * sizeof *f) == 0;
}

/* Probe for the stack; returns its id, or 0 with *slot set to the empty index slot. */
static uint32_t probe(const uintptr_t *f, uint32_t n, uint64_t h, uint64_t *slot) {
  for (uint64_t i = h & st.index_mask;; i = (i + 1) & st.index_mask) {
    uint32_t id = __atomic_load_n(&st.index[i], __ATOMIC_ACQUIRE);
    if (id == 0) {
      *slot = i;
      return 0;
    }
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

uint32_t ur_stacks_intern(const uintptr_t *f, uint32_t n) {
  struct ur_stack_table *t = ur_g.stacks;
  if (!n || !t || !t->max_frames) return 0;
  if (n > t->max_frames) n = t->max_frames;
  if (same_as_last(f, n)) return last.id;
  uint64_t h = hash_frames(f, n), slot;
  uint32_t id = probe(f, n, h, &slot);
  if (id) return remember(f, n, id);
  ur_modules_note(); /* its pcs' objects, while they are loaded */
  int locked = ur_lock(&ur_fork->stacks_lock, ur_tls.tid);
  id = probe(f, n, h, &slot); /* someone may have added it meanwhile */
  if (!id) {
    uint32_t next = t->count;
    if (next >= t->capacity) {
      __atomic_fetch_add(&t->overflowed, 1, __ATOMIC_RELAXED);
    } else {
      memcpy(&st.frames[(uint64_t)next * t->max_frames], f, n * sizeof *f);
      st.counts[next] = (uint16_t)n;
      st.hashes[next] = h;
      __atomic_store_n(&t->count, next + 1, __ATOMIC_RELEASE);
      __atomic_store_n(&st.index[slot], next, __ATOMIC_RELEASE);
      id = next;
    }
  }
  ur_unlock(&ur_fork->stacks_lock, locked);
  return remember(f, n, id);
}

size_t ur_stacks_get(uint32_t id, uintptr_t *out, size_t max) {
  const struct ur_stack_table *t = ur_g.stacks;
  if (!t || id == 0 || id >= __atomic_load_n(&t->count, __ATOMIC_ACQUIRE)) return 0;
  size_t n = st.counts[id];
  if (n > max) n = max;
  memcpy(out, &st.frames[(uint64_t)id * t->max_frames], n * sizeof *out);
  return n;
}

const uint64_t *ur_stacks_frames(uint32_t id, size_t *n) {
  const struct ur_stack_table *t = ur_g.stacks;
  if (!t || id == 0 || id >= __atomic_load_n(&t->count, __ATOMIC_ACQUIRE)) {
    *n = 0;
    return NULL;
  }
  *n = st.counts[id];
  return &st.frames[(uint64_t)id * t->max_frames];
}

void ur_stacks_lock(uint32_t tid) { ur_lock_hard(&ur_fork->stacks_lock, tid); }
void ur_stacks_unlock(void) { ur_unlock(&ur_fork->stacks_lock, 1); }
void ur_stacks_reset_lock(uint32_t owner_tid) {
  ur_fork->stacks_lock = owner_tid;
}
