/*
 * The registry of live allocations: the size maps (size_map.h) for most
 * blocks, and for the rest UR_NUM_SHARDS open-addressing tables keyed by the
 * mangled user pointer, laid out exactly as abi.h's ur_shard/ur_entry so the
 * scanner reads them straight out of a stopped target. Every function here
 * looks in the maps first.
 *
 * Tables are probed a cache line (four entries) at a time: a key's probe
 * sequence starts at the first entry of its home line and runs on linearly,
 * so finding a key or a free entry usually costs one line and no branch on
 * where in the line it was.
 *
 * Code outside registry.c walks the tables only through ur_registry_foreach*.
 */
#ifndef UR_REGISTRY_H
#define UR_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"
#include "deferred_ops.h"
#include "size_map.h"

_Static_assert(UR_NUM_SHARDS == 256, "ur_shard_of takes the shard from the top 8 hash bits");
_Static_assert(UR_STACK_CAPACITY - 1 <= UR_META_MAX_STACK_ID, "stack ids must fit in meta");

int ur_registry_init(void);

/* Register a block glibc has just handed out (in a map if it fits one). */
void ur_registry_insert(const void *p, size_t size, uint32_t stack_id);

/* Update the entry if present (realloc in place), else insert. */
void ur_registry_set(const void *p, size_t size, uint32_t stack_id);

/* Returns 1 if the pointer was registered. */
int ur_registry_remove(const void *p);

/* Remove and return what was registered (1), or 0 if p was not registered. */
int ur_registry_take(const void *p, uint64_t *size, uint32_t *stack_id);

/* Look up one pointer; returns 1 and fills size/stack_id if present. */
int ur_registry_find(const void *p, uint64_t *size, uint32_t *stack_id);

/* ---- walking the registry ----------------------------------------------------
 *
 * fn gets each live entry with its key still mangled (UR_UNMANGLE it).
 * lock=1: each shard is held while it is walked, so fn must not allocate or
 * touch the registry. lock=0: the caller guarantees nothing moves (under
 * malloc_disable, or in a frozen copy of the process, where a lock may have
 * been copied held by a thread that does not exist there). Both return the
 * number of entries visited. ur_registry_foreach walks the maps too (never
 * locked: see ur_size_maps_foreach); ur_registry_foreach_in_shard and
 * ur_registry_shard_count, the shards alone. */
typedef void (*ur_registry_fn)(uint64_t key, uint64_t size, uint32_t stack_id, void *arg);
size_t ur_registry_foreach_in_shard(unsigned shard, int lock, ur_registry_fn fn, void *arg);
size_t ur_registry_foreach(int lock, ur_registry_fn fn, void *arg);

/* Live entries in one shard / in all (exact only when nothing moves). */
uint64_t ur_registry_shard_count(unsigned shard);
uint64_t ur_registry_count(void);

static inline struct ur_shard *ur_shard_of(uint64_t addr, uint64_t *hash) {
  /* The shard comes from the 1 MiB region the block lies in: glibc gives
   * threads their own arenas, so threads mostly work on disjoint shards and
   * mostly own them (below). The table index comes from the whole address
   * (Fibonacci hashing: the top bits are the good ones). */
  *hash = (addr >> 4) * UINT64_C(0x9E3779B97F4A7C15);
  return &ur_g.shards[((addr >> 20) * UINT64_C(0x9E3779B97F4A7C15)) >> 56];
}

/* First entry of the home line of a hash in a table of capacity entries
 * (a power of two, 32 to 2^32: bits 32 and up of a Fibonacci hash are mixed
 * from every address bit below them). */
static inline uint64_t ur_home(uint64_t hash, uint64_t capacity) {
  return (hash >> 32) & (capacity - 4);
}

/* Lock or unlock every shard (malloc_disable, fork). */
void ur_registry_lock_all(uint32_t tid);
void ur_registry_unlock_all(void);
/* fork child: locks were copied in whatever state; nobody else exists now. */
void ur_registry_reset_locks(uint32_t owner_tid);

/* ---- the hot path, inlined into the entry points ---------------------------
 *
 * Holding a shard: a shard is unowned, owned by one thread, or shared. Its
 * owner updates it without touching the lock word (registry.c explains why
 * that is safe); everyone else locks it. ur_fork->shard_bias[i]: 0 unowned,
 * UR_BIAS_SHARED, or the owner's ur_tls.shard_token. */
#define UR_BIAS_SHARED UINT32_MAX
/* Per shard, the most entries (live + tombstones) the table may use before it
 * is rebuilt: 70% of capacity, 0 while there is no table. */
extern uint64_t ur_shard_limit[UR_NUM_SHARDS];

enum { UR_HOLD_NONE, UR_HOLD_BIASED, UR_HOLD_LOCKED };

/* Whether the shard may be updated without its lock: UR_HOLD_NONE when the
 * caller announced its operation and then saw UR_SLOW_SINGLE (single: the
 * thread that ends single-thread mode waits for that operation to finish, so
 * until then there is nobody to exclude), UR_HOLD_BIASED when the caller owns
 * the shard, else UR_HOLD_LOCKED: not held, the lock is needed (registry.c). */
static inline __attribute__((always_inline)) int ur_registry_try_hold(unsigned idx, int single) {
  if (single) return UR_HOLD_NONE;
  uint32_t tok = ur_tls.shard_token;
  if (UR_LIKELY(tok != 0)) {
    /* Name the shard, then check we own it, with no fence: a thread taking
     * it from us stores UR_BIAS_SHARED, runs membarrier, then waits for our
     * reserved0 to stop naming it. */
    struct ur_thread_slot *me = ur_tls.slot;
    __atomic_store_n(&me->reserved0, idx + 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (UR_LIKELY(ur_load32(&ur_fork->shard_bias[idx]) == tok)) return UR_HOLD_BIASED;
    __atomic_store_n(&me->reserved0, 0, __ATOMIC_RELAXED);
  }
  return UR_HOLD_LOCKED;
}

/* Applies what a signal handler's calls put aside (deferred_ops.h) for the
 * shards this thread is out of. */
void ur_registry_flush(void);

/* Undo ur_registry_try_hold (nothing to undo unless it returned BIASED). */
static inline __attribute__((always_inline)) void ur_registry_release_held(int how) {
  if (how == UR_HOLD_BIASED) {
    __atomic_store_n(&ur_tls.slot->reserved0, 0, __ATOMIC_RELEASE);
    if (UR_UNLIKELY(ur_deferred.n)) ur_registry_flush();
  }
}

static inline int ur_single(void) { return (ur_load32(&ur_g.slow) & UR_SLOW_SINGLE) != 0; }

/* The counters are single stores, never merged into one vector store: the
 * next 16-byte load of both would stall on store forwarding. */
static inline void ur_count_set(uint64_t *c, uint64_t v) {
  __atomic_store_n(c, v, __ATOMIC_RELAXED);
}

/* Meta first, key last (abi.h). */
static inline void ur_entry_write(struct ur_entry *e, uint64_t key, uint64_t meta) {
  __atomic_store_n(&e->meta, meta, __ATOMIC_RELAXED);
  __atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
}

static inline struct ur_shard *ur_shard_at(uint64_t addr, uint64_t *hash, unsigned *idx) {
  *hash = (addr >> 4) * UINT64_C(0x9E3779B97F4A7C15);
  *idx = (unsigned)(((addr >> 20) * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
  return &ur_g.shards[*idx];
}

/* The first entry of line g holding key / free (empty or tombstone), or
 * NULL. Selected with cmov, not branches: which of the four entries it is
 * varies from call to call, and a mispredicted branch on a load that missed
 * the cache would throw away the work done in the miss's shadow. */
static inline struct ur_entry *ur_pick_eq_(struct ur_entry *e, uint64_t key, struct ur_entry *cur) {
  __asm__("cmpq %[k], %[m]\n\tcmove %[e], %[c]"
          : [c] "+r"(cur)
          : [e] "r"(e), [k] "r"(key), [m] "m"(e->key)
          : "cc");
  return cur;
}
static inline struct ur_entry *ur_pick_free_(struct ur_entry *e, struct ur_entry *cur) {
  __asm__("cmpq %[t], %[m]\n\tcmovbe %[e], %[c]"
          : [c] "+r"(cur)
          : [e] "r"(e), [t] "i"(UR_KEY_TOMBSTONE), [m] "m"(e->key)
          : "cc");
  return cur;
}
static inline struct ur_entry *ur_line_find(struct ur_entry *g, uint64_t key) {
  struct ur_entry *e = ur_pick_eq_(&g[3], key, NULL);
  e = ur_pick_eq_(&g[2], key, e);
  e = ur_pick_eq_(&g[1], key, e);
  return ur_pick_eq_(&g[0], key, e);
}
static inline struct ur_entry *ur_line_free(struct ur_entry *g) {
  struct ur_entry *e = ur_pick_free_(&g[3], NULL);
  e = ur_pick_free_(&g[2], e);
  e = ur_pick_free_(&g[1], e);
  return ur_pick_free_(&g[0], e);
}

/* The fast paths: they call nothing, so the entry points keep few registers
 * live (every push is a store, and stores queue behind glibc's and the
 * program's stores to cold lines). They return 0, having changed nothing,
 * when the work needs the out-of-line ur_registry_insert/remove instead: a
 * shard another thread owns or shares, no table yet, a home line without
 * the key or without room, a table due for rebuilding, a huge size. */
static inline __attribute__((always_inline)) int ur_registry_try_insert(const void *p, uint64_t size,
                                                                        uint32_t stack_id,
                                                                        int single) {
  if (UR_LIKELY(ur_size_map_fits((uint64_t)(uintptr_t)p, size, stack_id))) {
    uint8_t *m = ur_size_map_of((uint64_t)(uintptr_t)p);
    if (UR_UNLIKELY(m == NULL)) return 0; /* the out-of-line insert makes the map */
    ur_size_map_put(m, (uint64_t)(uintptr_t)p, size);
    return 1;
  }
  uint64_t key = UR_MANGLE(p), hash, meta = UR_META(size, stack_id);
  unsigned idx;
  struct ur_shard *s = ur_shard_at((uint64_t)(uintptr_t)p, &hash, &idx);
  int how = ur_registry_try_hold(idx, single);
  /* Everything from the shard's line is loaded before the table's: the
   * table line may miss, and stores to it would make later loads wait. */
  uint64_t cap = s->capacity, tomb = s->tombstones, count = s->count;
  uint64_t limit = ur_shard_limit[idx];
  if (UR_LIKELY(how != UR_HOLD_LOCKED && cap != 0 && size <= UR_META_MAX_SIZE)) {
    struct ur_entry *g = (struct ur_entry *)(uintptr_t)s->table + ur_home(hash, cap);
    /* A fresh pointer is not registered (free removes it before glibc can
     * hand it out again): the first free entry from its home is its place. */
    struct ur_entry *e = ur_line_free(g);
    if (UR_LIKELY(e != NULL)) {
      /* A tombstone is reused as is; an empty entry counts against the limit. */
      uint64_t was_empty = e->key == UR_KEY_EMPTY;
      if (UR_LIKELY(count + tomb + was_empty <= limit)) {
        ur_entry_write(e, key, meta);
        ur_count_set(&s->tombstones, tomb + was_empty - 1);
        ur_count_set(&s->count, count + 1);
        ur_registry_release_held(how);
        return 1;
      }
    }
  }
  ur_registry_release_held(how);
  return 0;
}

/* The part of ur_registry_try_insert for a block with no stack id that fits
 * a map that exists: 1 when stored there, else 0 with nothing changed. */
static inline __attribute__((always_inline)) int ur_registry_try_insert_map(const void *p,
                                                                            uint64_t size) {
  uint8_t *m = ur_size_map_of((uint64_t)(uintptr_t)p); /* NULL too if p does not fit */
  if (UR_UNLIKELY(m == NULL) || UR_UNLIKELY(size > UR_SIZE_MAP_MAX_SIZE)) return 0;
  ur_size_map_put(m, (uint64_t)(uintptr_t)p, size);
  return 1;
}

/* p is on its way to __libc_free, which reads the word before it (glibc's
 * chunk header): so may ur_size_map_take. */
static inline __attribute__((always_inline)) int ur_registry_try_remove(const void *p, int single) {
  uint64_t addr = (uint64_t)(uintptr_t)p;
  uint8_t *m = ur_size_map_of(addr);
  if (UR_LIKELY(m != NULL) && UR_LIKELY(ur_size_map_take(m, addr))) return 1;
  uint64_t key = UR_MANGLE(p), hash;
  unsigned idx;
  struct ur_shard *s = ur_shard_at((uint64_t)(uintptr_t)p, &hash, &idx);
  int how = ur_registry_try_hold(idx, single);
  uint64_t cap = s->capacity, tomb = s->tombstones, count = s->count; /* before the table */
  struct ur_entry *e = NULL;
  if (UR_LIKELY(how != UR_HOLD_LOCKED && cap != 0)) {
    struct ur_entry *g = (struct ur_entry *)(uintptr_t)s->table + ur_home(hash, cap);
    e = ur_line_find(g, key);
    if (UR_LIKELY(e != NULL)) {
      __atomic_store_n(&e->key, UR_KEY_TOMBSTONE, __ATOMIC_RELEASE);
      ur_count_set(&s->count, count - 1);
      ur_count_set(&s->tombstones, tomb + 1);
    }
  }
  ur_registry_release_held(how);
  return e != NULL;
}

static inline void ur_registry_kill_held(struct ur_shard *s, struct ur_entry *e) {
  __atomic_store_n(&e->key, UR_KEY_TOMBSTONE, __ATOMIC_RELEASE);
  ur_count_set(&s->count, s->count - 1);
  ur_count_set(&s->tombstones, s->tombstones + 1);
}

#endif
