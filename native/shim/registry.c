#include "registry.h"

#include <string.h>

#include "lock.h"
#include "region.h"

#define MIN_CAPACITY 32u

/* Per shard, the table retired by the last resize: steady churn rehashes at
 * the same capacity over and over, so this saves the region lock and a fresh
 * table each time. */
static struct {
  struct ur_entry *table;
  uint64_t capacity;
} spare[UR_NUM_SHARDS];

int ur_registry_init(void) {
  ur_g.shards = ur_region_alloc(UR_NUM_SHARDS * sizeof(struct ur_shard));
  return ur_g.shards ? 0 : -1;
}

static inline uint64_t slot_index(uint64_t hash, uint64_t capacity) {
  return hash >> (64 - __builtin_ctzll(capacity));
}

/* Publish table and capacity with one 16-byte store: a stopped thread is
 * always between instructions, so a reader of a stopped target sees either
 * the old pair or the new one, never a mix. */
static inline void publish_table(struct ur_shard *s, struct ur_entry *table, uint64_t capacity) {
  uint64_t pair[2] = {(uint64_t)(uintptr_t)table, capacity};
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __asm__ volatile("movdqu %1, %%xmm0\n\tmovdqu %%xmm0, %0"
                   : "=m"(*(uint64_t(*)[2]) & s->table)
                   : "m"(pair)
                   : "xmm0", "memory");
}

static void put_entry(struct ur_entry *t, uint64_t cap, uint64_t hash, const struct ur_entry *e) {
  uint64_t mask = cap - 1;
  for (uint64_t i = slot_index(hash, cap);; i = (i + 1) & mask) {
    if (t[i].key == UR_KEY_EMPTY) {
      t[i].size = e->size;
      t[i].stack_id = e->stack_id;
      t[i].flags = 0;
      __atomic_store_n(&t[i].key, e->key, __ATOMIC_RELEASE);
      return;
    }
  }
}

/* Build the new table completely, publish it, then recycle the old one. */
static int resize(struct ur_shard *s) {
  uint64_t want = (s->count + 1) * 2, cap = MIN_CAPACITY;
  while (cap < want) cap <<= 1;
  unsigned si = (unsigned)(s - ur_g.shards);
  struct ur_entry *nt;
  if (spare[si].table && spare[si].capacity == cap) {
    nt = spare[si].table;
    spare[si].table = NULL;
    memset(nt, 0, cap * sizeof *nt);
  } else {
    nt = ur_region_table_get(cap);
    if (!nt) return -1;
  }
  struct ur_entry *old = (struct ur_entry *)(uintptr_t)s->table;
  uint64_t old_cap = s->capacity;
  for (uint64_t i = 0; i < old_cap; i++) {
    uint64_t k = old[i].key;
    if (k == UR_KEY_EMPTY || k == UR_KEY_TOMBSTONE) continue;
    uint64_t hash;
    ur_shard_of(k ^ UR_POINTER_MANGLE, &hash);
    put_entry(nt, cap, hash, &old[i]);
  }
  publish_table(s, nt, cap);
  s->tombstones = 0;
  if (old) {
    if (spare[si].table) ur_region_table_put(spare[si].table, spare[si].capacity);
    spare[si].table = old;
    spare[si].capacity = old_cap;
  }
  return 0;
}

static inline int make_room(struct ur_shard *s) {
  /* Keep (live + tombstones) under 70% so probes stay short. */
  if (UR_LIKELY((s->count + s->tombstones + 1) * 10 <= s->capacity * 7)) return 0;
  return resize(s);
}

static inline void fill(struct ur_shard *s, struct ur_entry *e, uint64_t key, uint64_t size,
                        uint32_t stack_id) {
  if (e->key == UR_KEY_TOMBSTONE) s->tombstones--;
  e->size = size;
  e->stack_id = stack_id;
  e->flags = 0;
  __atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
  s->count++;
}

/* A freshly allocated pointer cannot be registered already (free removes it
 * before glibc can hand it out again), so take the first free slot. */
void ur_registry_insert(const void *p, size_t size, uint32_t stack_id) {
  uint64_t key = UR_MANGLE(p), hash;
  struct ur_shard *s = ur_shard_of((uint64_t)(uintptr_t)p, &hash);
  int locked = ur_lock(&s->lock, &s->owner_tid, ur_tls.tid);
  if (UR_LIKELY(make_room(s) == 0)) {
    struct ur_entry *t = (struct ur_entry *)(uintptr_t)s->table;
    uint64_t mask = s->capacity - 1, i = slot_index(hash, s->capacity);
    while (t[i].key > UR_KEY_TOMBSTONE) i = (i + 1) & mask;
    fill(s, &t[i], key, size, stack_id);
  } /* else out of region: the block goes untracked rather than crash */
  ur_unlock(&s->lock, &s->owner_tid, locked);
}

void ur_registry_set(const void *p, size_t size, uint32_t stack_id) {
  uint64_t key = UR_MANGLE(p), hash;
  struct ur_shard *s = ur_shard_of((uint64_t)(uintptr_t)p, &hash);
  int locked = ur_lock(&s->lock, &s->owner_tid, ur_tls.tid);
  if (make_room(s) == 0) {
    struct ur_entry *t = (struct ur_entry *)(uintptr_t)s->table, *dst = NULL;
    uint64_t mask = s->capacity - 1;
    for (uint64_t i = slot_index(hash, s->capacity);; i = (i + 1) & mask) {
      uint64_t k = t[i].key;
      if (k == key) { /* same block, new size and site */
        t[i].size = size;
        t[i].stack_id = stack_id;
        dst = NULL;
        break;
      }
      if (k == UR_KEY_TOMBSTONE && !dst) dst = &t[i];
      if (k == UR_KEY_EMPTY) {
        if (!dst) dst = &t[i];
        break;
      }
    }
    if (dst) fill(s, dst, key, size, stack_id);
  }
  ur_unlock(&s->lock, &s->owner_tid, locked);
}

static struct ur_entry *lookup(struct ur_shard *s, uint64_t key, uint64_t hash) {
  if (!s->capacity) return NULL;
  struct ur_entry *t = (struct ur_entry *)(uintptr_t)s->table;
  uint64_t mask = s->capacity - 1;
  for (uint64_t i = slot_index(hash, s->capacity);; i = (i + 1) & mask) {
    uint64_t k = t[i].key;
    if (k == key) return &t[i];
    if (k == UR_KEY_EMPTY) return NULL;
  }
}

int ur_registry_take(const void *p, uint64_t *size, uint32_t *stack_id) {
  uint64_t key = UR_MANGLE(p), hash;
  struct ur_shard *s = ur_shard_of((uint64_t)(uintptr_t)p, &hash);
  int locked = ur_lock(&s->lock, &s->owner_tid, ur_tls.tid);
  struct ur_entry *e = lookup(s, key, hash);
  if (e) {
    *size = e->size;
    *stack_id = e->stack_id;
    __atomic_store_n(&e->key, UR_KEY_TOMBSTONE, __ATOMIC_RELEASE);
    s->count--;
    s->tombstones++;
  }
  ur_unlock(&s->lock, &s->owner_tid, locked);
  return e != NULL;
}

int ur_registry_remove(const void *p) {
  uint64_t size;
  uint32_t stack_id;
  return ur_registry_take(p, &size, &stack_id);
}

int ur_registry_find(const void *p, uint64_t *size, uint32_t *stack_id) {
  uint64_t key = UR_MANGLE(p), hash;
  struct ur_shard *s = ur_shard_of((uint64_t)(uintptr_t)p, &hash);
  int locked = ur_lock(&s->lock, &s->owner_tid, ur_tls.tid);
  struct ur_entry *e = lookup(s, key, hash);
  if (e) {
    *size = e->size;
    *stack_id = e->stack_id;
  }
  ur_unlock(&s->lock, &s->owner_tid, locked);
  return e != NULL;
}

void ur_registry_lock_all(uint32_t tid) {
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++)
    ur_lock_hard(&ur_g.shards[i].lock, &ur_g.shards[i].owner_tid, tid);
}

void ur_registry_unlock_all(void) {
  for (unsigned i = UR_NUM_SHARDS; i-- > 0;)
    ur_unlock(&ur_g.shards[i].lock, &ur_g.shards[i].owner_tid, 1);
}

void ur_registry_reset_locks(uint32_t owner_tid) {
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++) {
    ur_g.shards[i].lock = owner_tid ? 1 : 0;
    ur_g.shards[i].owner_tid = owner_tid;
  }
}
