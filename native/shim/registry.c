#include "registry.h"

#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/membarrier.h>

#include "lock.h"
#include "region.h"

#define MIN_CAPACITY 32u

_Static_assert(MIN_CAPACITY % 4 == 0 && sizeof(struct ur_entry) * 4 == 64, "one line, 4 entries");
/* ur_home takes the index from hash bits 32 and up. */
#define MAX_CAPACITY (UINT64_C(1) << 32)

uint64_t ur_shard_limit[UR_NUM_SHARDS];

/* Per shard, the table retired by the last resize: steady churn rehashes at
 * the same capacity over and over, so this saves the region lock and a fresh
 * table each time. */
static struct {
  struct ur_entry *table;
  uint64_t capacity;
} spare[UR_NUM_SHARDS];

int ur_registry_init(void) {
  ur_g.shards = ur_region_alloc(UR_NUM_SHARDS * sizeof(struct ur_shard));
  return ur_g.shards && ur_size_maps_init() == 0 ? 0 : -1;
}

/* The map for a block that fits one, made if need be; NULL: use a shard. */
static uint8_t *map_for(const void *p, uint64_t size, uint32_t stack_id) {
  uint64_t addr = (uint64_t)(uintptr_t)p;
  uint8_t *m = ur_size_map_fits(addr, size, stack_id) ? ur_size_map_make(addr) : NULL;
  /* Said before the block enters a shard: a thread freeing it got the
   * pointer after that. */
  if (UR_UNLIKELY(m == NULL) && size <= UR_SIZE_MAP_L0_MAX_SIZE)
    __atomic_store_n(&ur_g.small_in_shards, 1, __ATOMIC_RELAXED);
  return m;
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

/* The first free entry of the probe sequence (the table has one). */
static struct ur_entry *first_free(struct ur_entry *t, uint64_t cap, uint64_t hash) {
  uint64_t mask = cap - 1;
  for (uint64_t i = ur_home(hash, cap);; i = (i + 1) & mask)
    if (t[i].key <= UR_KEY_TOMBSTONE) return &t[i];
}

/* ---- a signal handler inside a rebuild ---------------------------------------
 *
 * A rebuild copies the old table into a new one, then publishes it. A
 * signal handler's malloc or free that lands in between on the same thread
 * would change the old table after its entry was copied: a freed block
 * would come back in the new one, registered for good. So the rebuild runs
 * busy (the handler's calls take the out-of-line paths), and their updates
 * of the shard being rebuilt wait on a list (deferred_ops.h, as long as
 * the handler makes them) until it is published. So do a
 * handler's updates of any shard its thread is inside (inside(), below),
 * until the interrupted call leaves it (ur_registry_flush). The list may
 * hold updates of more than one shard (a handler's call rebuilding a shard
 * while its thread is inside, or rebuilding, another): each is applied to
 * its own shard only. */
#define DEFER_REMOVE UR_DEFER_REMOVE

/* Whether this thread is inside shard s already, so that the caller is a
 * signal handler's call nested in the thread's own update of it: owning s
 * (its slot's reserved0 names it) or holding its lock (but for the thread
 * that holds every lock, malloc_disable's or fork's, which is no update).
 * The nested call must not update s, whose update it interrupted halfway:
 * it took the entry the interrupted call had picked, or the counts the
 * interrupted call then wrote back stale (a full table, probed for ever).
 * Not seen: a thread in single-thread mode, which marks nothing. */
static int inside(struct ur_shard *s) {
  unsigned idx = (unsigned)(s - ur_g.shards);
  struct ur_thread_slot *me = ur_tls.slot;
  if (me && ur_load32(&me->reserved0) == idx + 1) return 1;
  uint32_t tid = ur_tls.tid;
  return tid && ur_lock_holder(&ur_fork->shard_lock[idx]) == tid && ur_load32(&ur_fork->excl_tid) != tid;
}

/* An update put aside that there was no memory to keep: the registry is
 * no longer exact, and scans say so. */
static void lost_update(void) {
  if (__atomic_fetch_add(&unreachable_descriptor.unregistered, 1, __ATOMIC_RELAXED) == 0) {
    static const char msg[] =
        "unreachable: no memory to keep a signal handler's registry update: a block may "
        "go unregistered or stay registered once freed, and scans may miss or invent leaks\n";
    ur_write_stderr(msg, sizeof msg - 1);
  }
}

/* Whether the update was put aside (s is being rebuilt by this thread, or
 * this thread's interrupted call is inside it). */
static int defer(struct ur_shard *s, uint64_t key, uint64_t meta) {
  if (UR_LIKELY(ur_tls.resizing != s) && !inside(s)) return 0;
  if (ur_deferred_add(key, meta) != 0) lost_update();
  return 1;
}

static struct ur_entry *lookup_held(struct ur_shard *s, uint64_t key, uint64_t hash);
static int resize_table(struct ur_shard *s);
void ur_registry_insert_held(struct ur_shard *s, uint64_t hash, uint64_t key, uint64_t meta);

static int of_shard(uint64_t key, void *s) {
  uint64_t hash;
  unsigned idx;
  return ur_shard_at(UR_UNMANGLE(key), &hash, &idx) == s;
}

/* Apply what was put aside for s (held), in order, one update at a time
 * taken off the list: an insert applied here may rebuild s, and that
 * rebuild then applies the next ones, still in order. The others' stay. */
static void apply_deferred(struct ur_shard *s) {
  uint64_t key, meta;
  while (ur_deferred_take(of_shard, s, &key, &meta)) {
    uint64_t hash;
    unsigned idx;
    ur_shard_at(UR_UNMANGLE(key), &hash, &idx);
    if (meta == DEFER_REMOVE) {
      struct ur_entry *e = lookup_held(s, key, hash);
      if (e) ur_registry_kill_held(s, e);
    } else {
      ur_registry_insert_held(s, hash, key, meta);
    }
  }
}

/* Build the new table completely, publish it, then recycle the old one.
 * A handler's call may rebuild another shard while this thread rebuilds
 * one: the outer rebuild's mark is put back as it was. */
static int resize(struct ur_shard *s) {
  struct ur_shard *outer = ur_tls.resizing;
  ur_tls.busy++;
  ur_tls.resizing = s;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  int r = resize_table(s);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  ur_tls.resizing = outer;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  ur_tls.busy--;
  apply_deferred(s);
  return r;
}

static int resize_table(struct ur_shard *s) {
  uint64_t want = (s->count + 1) * 2, cap = MIN_CAPACITY;
  while (cap < want) cap <<= 1;
  if (cap > MAX_CAPACITY) return -1;
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
    ur_entry_write(first_free(nt, cap, hash), k, old[i].meta);
  }
  publish_table(s, nt, cap);
  ur_count_set(&s->tombstones, 0);
  ur_shard_limit[si] = cap * 7 / 10;
  if (old) {
    if (spare[si].table) ur_region_table_put(spare[si].table, spare[si].capacity);
    spare[si].table = old;
    spare[si].capacity = old_cap;
  }
  return 0;
}

static inline int make_room(struct ur_shard *s) {
  /* Keep (live + tombstones) under 70% so probes stay short. */
  if (UR_LIKELY(s->count + s->tombstones + 1 <= ur_shard_limit[s - ur_g.shards])) return 0;
  return resize(s);
}

/* The entry holding key, or NULL. */
static struct ur_entry *lookup_held(struct ur_shard *s, uint64_t key, uint64_t hash) {
  uint64_t cap = s->capacity;
  if (!cap) return NULL;
  struct ur_entry *t = (struct ur_entry *)(uintptr_t)s->table;
  for (uint64_t i = ur_home(hash, cap);; i = (i + 4) & (cap - 1)) {
    struct ur_entry *e = ur_line_find(&t[i], key);
    if (e) return e;
    /* A key never lies past an empty entry of its probe sequence. */
    if (ur_line_find(&t[i], UR_KEY_EMPTY)) return NULL;
  }
}

/* ---- holding a shard --------------------------------------------------------
 *
 * A shard is unowned, owned by one thread, or shared. Its owner updates it
 * without touching the lock word: it names the shard in its thread slot
 * (reserved0 = shard + 1), then checks it still owns it, with no fence
 * between (ur_registry_try_hold). Every other thread takes the lock; finding the
 * shard owned, it marks it shared, runs membarrier (a barrier on every
 * running thread of the process, so the owner either sees the mark or shows
 * its reserved0) and waits until the owner is out of the shard. A shard is
 * owned by the first thread that locks it once the process is
 * multi-threaded; a second thread makes it shared for good (until the next
 * malloc_disable or fork resets it). Threads mostly allocate from their own
 * glibc arena, so their shards stay theirs and the hot path pays no atomic
 * read-modify-write (each would wait for the store buffer to drain, full of
 * glibc's stores to cold chunk headers). Ownership changes nothing for
 * readers: they stop the target and rely only on the publication order of
 * abi.h, never on the lock. */


static void membarrier_all(void) {
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* not reached: bias_ok means it works */
}

/* Wait until the thread in slot token-1 is out of shard idx. */
static void wait_owner(uint32_t token, unsigned idx) {
  struct ur_thread_slot *o = &ur_g.threads[token - 1];
  unsigned looks = 0;
  /* Yields, then naps: the owner may be held there for long (a handler
   * that blocks, a debugger's stop), and the waiter may be the helper. */
  while (__atomic_load_n(&o->reserved0, __ATOMIC_ACQUIRE) == idx + 1)
    ur_wait_a_turn(&looks);
}

/* Take the shard for an update: owned, or locked (claiming it when nobody
 * owns it, taking it from its owner when someone does). */
static int hold(unsigned idx, int single) {
  /* The thread's slot names a shard: this is a handler's call nested in
   * an update of it (inside() kept it from that one). Naming its own shard
   * there, and clearing the slot as it left, would leave the interrupted
   * update unnamed, open to a thread taking the shard from its owner. */
  struct ur_thread_slot *me = ur_tls.slot;
  int how = me && ur_load32(&me->reserved0) ? UR_HOLD_LOCKED : ur_registry_try_hold(idx, single);
  if (how != UR_HOLD_LOCKED) return how;
  int locked = ur_lock(&ur_fork->shard_lock[idx], ur_tls.tid);
  uint32_t b = ur_load32(&ur_fork->shard_bias[idx]), tok = ur_tls.shard_token;
  if (b == 0) {
    /* Claim it: under the lock, so no other thread is inside. */
    if (locked && tok && ur_load32(&ur_g.bias_ok))
      __atomic_store_n(&ur_fork->shard_bias[idx], tok, __ATOMIC_RELAXED);
  } else if (b != UR_BIAS_SHARED && b != tok) {
    __atomic_store_n(&ur_fork->shard_bias[idx], UR_BIAS_SHARED, __ATOMIC_SEQ_CST);
    membarrier_all();
    wait_owner(b, idx);
  }
  /* Not locked: malloc_disable's or fork's thread, which holds every lock. */
  return locked ? UR_HOLD_LOCKED : UR_HOLD_NONE;
}

static void release(struct ur_shard *s, int how) {
  if (how == UR_HOLD_LOCKED) {
    ur_unlock(&ur_fork->shard_lock[s - ur_g.shards], 1);
    if (UR_UNLIKELY(ur_deferred.n)) ur_registry_flush();
  } else {
    ur_registry_release_held(how);
  }
}

/* Apply what handlers' calls put aside while this thread was inside their
 * shard (defer), shard by shard, for each it is out of. */
__attribute__((noinline)) void ur_registry_flush(void) {
  uint64_t key;
  for (uint32_t i = 0; ur_deferred_key(i, &key);) {
    uint64_t hash;
    unsigned idx;
    struct ur_shard *s = ur_shard_at(UR_UNMANGLE(key), &hash, &idx);
    /* Still rebuilding it (its rebuild applies them), or inside it (a nested
     * call leaving another shard): not yet. */
    if (s == ur_tls.resizing || inside(s)) {
      i++;
      continue;
    }
    int how = hold(idx, ur_single());
    apply_deferred(s);
    release(s, how);
    i = 0; /* the list is shorter */
  }
}

/* A signal handler's call nested in its own thread's use of the region gets
 * no bigger table (region.h): it fills the table there is past its load
 * limit, keeping an entry empty to end every probe; a later insert grows it. */
static int room_to_spare(const struct ur_shard *s) {
  return s->count + s->tombstones + 2 <= s->capacity && ur_region_held_here();
}

void ur_registry_insert_held(struct ur_shard *s, uint64_t hash, uint64_t key, uint64_t meta) {
  if (make_room(s) != 0 && !room_to_spare(s)) {
    /* No memory for a bigger table (or a first one, for a handler's call
     * whose thread holds the region): the block goes untracked rather than
     * crash or wait for ever, and scans say their answer is not exact. */
    if (__atomic_fetch_add(&unreachable_descriptor.unregistered, 1, __ATOMIC_RELAXED) == 0) {
      static const char msg[] =
          "unreachable: no memory left for the registry (ulimit -v or strict overcommit): "
          "blocks from now on may go unregistered, and scans may miss or invent leaks\n";
      static const char fixed[] =
          "unreachable: the program's own seccomp filter may refuse the calls that grow the "
          "registry, and its room is used up: blocks from now on may go unregistered, and "
          "scans may miss or invent leaks\n";
      static const char nested[] =
          "unreachable: a signal handler allocated while its thread was extending the "
          "registry: its block went unregistered, and scans may miss or invent leaks\n";
      if (ur_region_held_here()) ur_write_stderr(nested, sizeof nested - 1);
      else if (ur_region_fixed()) ur_write_stderr(fixed, sizeof fixed - 1);
      else ur_write_stderr(msg, sizeof msg - 1);
    }
    return;
  }
  struct ur_entry *e = first_free((struct ur_entry *)(uintptr_t)s->table, s->capacity, hash);
  if (e->key == UR_KEY_TOMBSTONE) ur_count_set(&s->tombstones, s->tombstones - 1);
  ur_entry_write(e, key, meta);
  ur_count_set(&s->count, s->count + 1);
}

void ur_registry_insert(const void *p, size_t size, uint32_t stack_id) {
  uint8_t *m = map_for(p, size, stack_id);
  if (m) {
    ur_size_map_put(m, (uint64_t)(uintptr_t)p, size);
    return;
  }
  if (size > UR_META_MAX_SIZE) return; /* 16 TiB: not registered (abi.h) */
  uint64_t hash;
  unsigned idx;
  struct ur_shard *s = ur_shard_at((uint64_t)(uintptr_t)p, &hash, &idx);
  if (defer(s, UR_MANGLE(p), UR_META(size, stack_id))) return;
  int how = hold(idx, ur_single());
  ur_registry_insert_held(s, hash, UR_MANGLE(p), UR_META(size, stack_id));
  release(s, how);
}

/* The block moves between a map and a shard with its new home written first:
 * its thread is in flight (realloc) while a reader could see it in both. */
void ur_registry_set(const void *p, size_t size, uint32_t stack_id) {
  uint64_t addr = (uint64_t)(uintptr_t)p, was;
  int level;
  uint8_t *old = ur_size_map_registered(addr, &level, &was);
  if (old) {
    if (ur_size_map_fits(addr, size, stack_id)) {
      ur_size_map_put(old, addr, size); /* same level: one store */
      if (ur_size_map_level(size) != level) ur_size_map_clear(old, addr, level);
    } else {
      ur_registry_insert(p, size, stack_id);
      ur_size_map_clear(old, addr, level);
    }
    return;
  }
  uint64_t key = UR_MANGLE(p), hash;
  unsigned idx;
  struct ur_shard *s = ur_shard_at((uint64_t)(uintptr_t)p, &hash, &idx);
  if (UR_UNLIKELY(ur_tls.resizing == s || inside(s))) {
    defer(s, key, DEFER_REMOVE);
    uint8_t *m = map_for(p, size, stack_id);
    if (m) ur_size_map_put(m, addr, size);
    else if (size <= UR_META_MAX_SIZE) defer(s, key, UR_META(size, stack_id));
    return;
  }
  int how = hold(idx, ur_single());
  struct ur_entry *e = lookup_held(s, key, hash);
  uint8_t *m = map_for(p, size, stack_id);
  if (m) {
    ur_size_map_put(m, addr, size);
    if (e) ur_registry_kill_held(s, e);
  } else if (size > UR_META_MAX_SIZE) { /* not registered (abi.h) */
    if (e) ur_registry_kill_held(s, e);
  } else if (e) { /* same block, new size and site: one store */
    __atomic_store_n(&e->meta, UR_META(size, stack_id), __ATOMIC_RELEASE);
  } else {
    ur_registry_insert_held(s, hash, key, UR_META(size, stack_id));
  }
  release(s, how);
}

/* Look p up under the shard's hold; report its size and stack id, and
 * remove it when `kill`. Returns 1 if p was registered. */
static int lookup(const void *p, uint64_t *size, uint32_t *stack_id, int kill) {
  int level;
  uint8_t *m = ur_size_map_registered((uint64_t)(uintptr_t)p, &level, size);
  if (m) {
    *stack_id = 0;
    if (kill) ur_size_map_clear(m, (uint64_t)(uintptr_t)p, level);
    return 1;
  }
  uint64_t key = UR_MANGLE(p), hash;
  unsigned idx;
  struct ur_shard *s = ur_shard_at((uint64_t)(uintptr_t)p, &hash, &idx);
  /* This thread holds it (a rebuild, or the call a handler interrupted): read as is. */
  int rebuilding = UR_UNLIKELY(ur_tls.resizing == s) || inside(s);
  int how = rebuilding ? UR_HOLD_NONE : hold(idx, ur_single());
  struct ur_entry *e = lookup_held(s, key, hash);
  if (e) {
    *size = UR_META_SIZE(e->meta);
    *stack_id = UR_META_STACK_ID(e->meta);
    if (kill && !(rebuilding && defer(s, key, DEFER_REMOVE))) ur_registry_kill_held(s, e);
  }
  release(s, how);
  return e != NULL;
}

int ur_registry_take(const void *p, uint64_t *size, uint32_t *stack_id) {
  return lookup(p, size, stack_id, 1);
}

int ur_registry_remove(const void *p) {
  uint64_t size;
  uint32_t stack_id;
  return lookup(p, &size, &stack_id, 1);
}

int ur_registry_find(const void *p, uint64_t *size, uint32_t *stack_id) {
  return lookup(p, size, stack_id, 0);
}

/* ---- walking ----------------------------------------------------------------- */

size_t ur_registry_foreach_in_shard(unsigned shard, int lock, ur_registry_fn fn, void *arg) {
  if (!ur_g.shards || shard >= UR_NUM_SHARDS) return 0;
  struct ur_shard *s = &ur_g.shards[shard];
  int how = lock ? hold(shard, ur_single()) : UR_HOLD_NONE;
  const struct ur_entry *t = (const struct ur_entry *)(uintptr_t)s->table;
  uint64_t cap = s->capacity;
  size_t n = 0;
  for (uint64_t i = 0; i < cap; i++) {
    uint64_t k = t[i].key, m = t[i].meta;
    if (k == UR_KEY_EMPTY || k == UR_KEY_TOMBSTONE) continue;
    fn(k, UR_META_SIZE(m), UR_META_STACK_ID(m), arg);
    n++;
  }
  release(s, how);
  return n;
}

size_t ur_registry_foreach(int lock, ur_registry_fn fn, void *arg) {
  size_t n = ur_size_maps_foreach(0, UINT64_MAX, fn, arg);
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++) n += ur_registry_foreach_in_shard(i, lock, fn, arg);
  return n;
}

uint64_t ur_registry_shard_count(unsigned shard) {
  if (!ur_g.shards || shard >= UR_NUM_SHARDS) return 0;
  return __atomic_load_n(&ur_g.shards[shard].count, __ATOMIC_RELAXED);
}

uint64_t ur_registry_count(void) {
  uint64_t n = ur_size_maps_count();
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++) n += ur_registry_shard_count(i);
  return n;
}

/* ---- every shard at once ------------------------------------------------------ */


void ur_registry_lock_all(uint32_t tid) {
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++)
    ur_lock_hard(&ur_fork->shard_lock[i], tid);
  /* Owners do not take the lock: make every shard shared, then wait them out. */
  int any = 0;
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++) {
    uint32_t b = ur_load32(&ur_fork->shard_bias[i]);
    ur_fork->bias_before[i] = b;
    any |= b != 0 && b != UR_BIAS_SHARED;
    __atomic_store_n(&ur_fork->shard_bias[i], UR_BIAS_SHARED, __ATOMIC_SEQ_CST);
  }
  if (!any) return;
  membarrier_all();
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++)
    if (ur_fork->bias_before[i] != 0 && ur_fork->bias_before[i] != UR_BIAS_SHARED) wait_owner(ur_fork->bias_before[i], i);
}

void ur_registry_unlock_all(void) {
  for (unsigned i = UR_NUM_SHARDS; i-- > 0;) {
    /* A shard two threads used stays shared; one that was owned (or unused)
     * is up for grabs again: its owner may be gone (fork child). */
    if (ur_fork->bias_before[i] != UR_BIAS_SHARED) __atomic_store_n(&ur_fork->shard_bias[i], 0, __ATOMIC_RELAXED);
    ur_unlock(&ur_fork->shard_lock[i], 1);
  }
}

void ur_registry_reset_locks(uint32_t owner_tid) {
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++) {
    ur_fork->shard_lock[i] = owner_tid;
    /* The child's only thread owns nothing yet. Still held by the forking
     * thread (it had malloc_disable()d): shared until malloc_enable. */
    ur_fork->shard_bias[i] = owner_tid ? UR_BIAS_SHARED : 0;
    ur_fork->bias_before[i] = 0;
  }
}
