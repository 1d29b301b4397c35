/* The registry and stack table compiled straight into a sanitized test
 * (no preloading): random inserts and removes against a reference set, with
 * the table invariants the scanner relies on checked as we go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "region.h"
#include "registry.h"
#include "state.h"
#include "stacks.h"
#include "unit_test.h"
#include "shim_globals.h"

#define N 20000

static int shard_has(uint64_t addr) {
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++) {
    const struct ur_entry *t = (const struct ur_entry *)(uintptr_t)ur_g.shards[i].table;
    for (uint64_t j = 0; j < ur_g.shards[i].capacity; j++)
      if (t[j].key == UR_MANGLE(addr)) return 1;
  }
  return 0;
}

static void check_tables(size_t want_live) {
  size_t live = 0;
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++) {
    struct ur_shard *s = &ur_g.shards[i];
    const struct ur_entry *t = (const struct ur_entry *)(uintptr_t)s->table;
    uint64_t n = 0, tomb = 0;
    for (uint64_t j = 0; j < s->capacity; j++) {
      if (t[j].key == UR_KEY_TOMBSTONE) tomb++;
      else if (t[j].key != UR_KEY_EMPTY) n++;
    }
    CHECK(n == s->count && tomb == s->tombstones);
    CHECK(s->capacity == 0 || (s->capacity & (s->capacity - 1)) == 0);
    CHECK(s->lock == 0 && s->owner_tid == 0);
    /* Linear probing from each key's home line: no empty entry between a
     * key's home and the key (lookups stop at the first line with one). */
    for (uint64_t j = 0; j < s->capacity; j++) {
      if (t[j].key <= UR_KEY_TOMBSTONE) continue;
      uint64_t hash;
      ur_shard_of(UR_UNMANGLE(t[j].key), &hash);
      for (uint64_t h = ur_home(hash, s->capacity); h != j; h = (h + 1) & (s->capacity - 1))
        CHECK(t[h].key != UR_KEY_EMPTY);
    }
    live += n;
  }
  CHECK(live + ur_size_maps_count() == want_live);
}

static uint32_t id_of(int i) { return i % 3 ? (uint32_t)i : 0; }

/* A block is in a map exactly when it fits one, at its size's level, and
 * then in no shard. */
static void check_homes(const uintptr_t *ptrs, const uint64_t *sizes, const int *live, int n) {
  for (int i = 0; i < n; i++) {
    uint8_t *m = ur_size_map_of(ptrs[i]);
    uint64_t size = 0;
    int level = m ? ur_size_map_find_in(m, ptrs[i], &size) : -1;
    int fits = live[i] && ur_size_map_fits(ptrs[i], sizes[i], id_of(i));
    CHECK((level >= 0) == fits);
    if (level >= 0) CHECK(size == sizes[i] && level == ur_size_map_level(sizes[i]));
  }
}

struct walk {
  size_t n;
  uint64_t bytes;
};

static void count_entry(uint64_t key, uint64_t size, uint32_t stack_id, void *arg) {
  struct walk *w = arg;
  CHECK(key > UR_KEY_TOMBSTONE && stack_id < N);
  w->n++;
  w->bytes += size;
}

int main(void) {
  ur_self_tid();
  CHECK(ur_region_init() == 0);
  CHECK(ur_registry_init() == 0);
  CHECK(ur_stacks_init(8, 4) == 0);

  static uintptr_t ptrs[N];
  static uint64_t sizes[N];
  static int live[N];
  size_t nlive = 0;
  unsigned seed = 1;
  /* Each block in a 4 KiB of its own (the maps' levels hold one block per
   * granule: blocks are disjoint), most 16-aligned. */
  for (int i = 0; i < N; i++) ptrs[i] = 0x10000 + (uintptr_t)i * 4096 + (uintptr_t)(i % 7) * 24;
  for (int round = 0; round < 200000; round++) {
    int i = rand_r(&seed) % N;
    if (live[i] && rand_r(&seed) % 2) {
      CHECK(ur_registry_remove((void *)ptrs[i]) == 1);
      live[i] = 0;
      nlive--;
    } else {
      /* Three quarters of the sizes around the limits of the maps' levels
       * and of the maps, so reallocs move blocks between levels and between
       * a map and a shard both ways; a quarter up to 43 bits. */
      static const uint64_t limits[3] = {UR_SIZE_MAP_L0_MAX_SIZE, UR_SIZE_MAP_L1_MAX_SIZE,
                                         UR_SIZE_MAP_MAX_SIZE};
      int kind = rand_r(&seed) % 4;
      if (kind < 3)
        sizes[i] = limits[kind] - 8 + (uint64_t)(rand_r(&seed) % 16);
      else
        sizes[i] = (uint64_t)rand_r(&seed) >> (rand_r(&seed) % 31) << (rand_r(&seed) % 13);
      /* insert is for fresh blocks; set updates (realloc in place) or inserts */
      if (live[i] || rand_r(&seed) % 4 == 0)
        ur_registry_set((void *)ptrs[i], sizes[i], id_of(i));
      else
        ur_registry_insert((void *)ptrs[i], sizes[i], id_of(i));
      if (!live[i]) nlive++;
      live[i] = 1;
    }
    if (round % 50000 == 0) {
      check_tables(nlive);
      check_homes(ptrs, sizes, live, N);
    }
  }
  check_tables(nlive);
  check_homes(ptrs, sizes, live, N);
  for (int i = 0; i < N; i++) {
    uint64_t size;
    uint32_t id;
    int found = ur_registry_find((void *)ptrs[i], &size, &id);
    CHECK(found == live[i]);
    if (found) CHECK(size == sizes[i] && id == id_of(i));
    if (!found) CHECK(ur_registry_remove((void *)ptrs[i]) == 0);
  }
  /* A block off the 16-byte grid or
   * above 2^47 goes to a shard even when small. */
  uint64_t sz;
  uint32_t sid;
  ur_registry_insert((void *)0x9000008, 8, 0);
  CHECK(shard_has(0x9000008));
  CHECK(ur_registry_find((void *)0x9000008, &sz, &sid) == 1 && sz == 8 && sid == 0);
  CHECK(ur_registry_remove((void *)0x9000008) == 1 && !shard_has(0x9000008));
  ur_registry_insert((void *)(UINT64_C(1) << 47), 16, 0);
  CHECK(shard_has(UINT64_C(1) << 47));
  CHECK(ur_registry_remove((void *)(UINT64_C(1) << 47)) == 1);

  /* Keys are stored mangled: no raw pointer appears in any table. */
  for (unsigned i = 0; i < UR_NUM_SHARDS; i++) {
    const struct ur_entry *t = (const struct ur_entry *)(uintptr_t)ur_g.shards[i].table;
    for (uint64_t j = 0; j < ur_g.shards[i].capacity; j++)
      if (t[j].key > UR_KEY_TOMBSTONE) CHECK(UR_UNMANGLE(t[j].key) >= 0x10000 && t[j].key >> 63);
  }
  /* Sizes of 16 TiB and more are not registered; the largest below is. */
  ur_registry_insert((void *)0x7000000, UR_META_MAX_SIZE + 1, 3);
  uint64_t big;
  uint32_t big_id;
  CHECK(ur_registry_find((void *)0x7000000, &big, &big_id) == 0);
  ur_registry_insert((void *)0x7000000, UR_META_MAX_SIZE, UR_META_MAX_STACK_ID);
  CHECK(ur_registry_find((void *)0x7000000, &big, &big_id) == 1);
  CHECK(big == UR_META_MAX_SIZE && big_id == UR_META_MAX_STACK_ID);
  ur_registry_set((void *)0x7000000, 5, 7); /* realloc in place */
  CHECK(ur_registry_find((void *)0x7000000, &big, &big_id) == 1 && big == 5 && big_id == 7);
  ur_registry_set((void *)0x7000000, UR_META_MAX_SIZE + 1, 7); /* grew past the limit */
  CHECK(ur_registry_find((void *)0x7000000, &big, &big_id) == 0);

  /* The walker sees exactly the live entries. */
  struct walk w = {0, 0}, want = {0, 0};
  for (int i = 0; i < N; i++)
    if (live[i]) {
      want.n++;
      want.bytes += sizes[i];
    }
  CHECK(ur_registry_foreach(1, count_entry, &w) == want.n);
  CHECK(w.n == want.n && w.bytes == want.bytes && ur_registry_count() == want.n);

  for (int i = 0; i < N; i++)
    if (live[i]) ur_registry_remove((void *)ptrs[i]);
  check_tables(0);

  /* Stack table: dedup, truncation to max_frames, overflow into id 0. */
  struct ur_stack_table *st = ur_g.stacks;
  uintptr_t a[] = {1, 2, 3}, b[] = {1, 2, 4}, c[] = {9, 8, 7, 6, 5}, out[8];
  uint32_t ia = ur_stacks_intern(a, 3), ib = ur_stacks_intern(b, 3);
  CHECK(ia == 1 && ib == 2 && ur_stacks_intern(a, 3) == ia);
  CHECK(ur_stacks_intern(a, 0) == 0);
  CHECK(ur_stacks_get(ia, out, 8) == 3 && memcmp(out, a, sizeof a) == 0);
  CHECK(ur_stacks_get(ib, out, 2) == 2 && out[1] == 2);
  uint32_t ic = ur_stacks_intern(c, 5);
  CHECK(ur_stacks_get(ic, out, 8) == 4); /* max_frames = 4 */
  CHECK(st->count == 4 && st->overflowed == 0);
  for (uintptr_t k = 100; k < 110; k++) ur_stacks_intern(&k, 1);
  CHECK(st->count == 8 && st->overflowed == 6);
  uintptr_t k = 1000;
  CHECK(ur_stacks_intern(&k, 1) == 0);
  CHECK(ur_stacks_intern(b, 3) == ib); /* known stacks still found when full */
  printf("OK\n");
  return 0;
}
