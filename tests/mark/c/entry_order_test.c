/* native/mark/entry_order.c and radix_sort.c's in-order fast path under
 * ASan+UBSan (tests/mark/test_entry_order_c.py): a registry's entries as
 * its readers collect them (the shards' in any order, then the maps' in
 * order) come out sorted and stable; a maps' part out of order (a damaged
 * registry) still sorts. */
#include "alloc.h"
#include "entry_order.h"
#include "radix_sort.h"
#include "unit_test.h"

/* Sorted by begin; equal begins in input order (ids were numbered so). */
static void check_sorted(const uint64_t *pairs, const uint32_t *ids, size_t n) {
  for (size_t i = 1; i < n; i++) {
    CHECK(pairs[2 * (i - 1)] <= pairs[2 * i]);
    if (pairs[2 * (i - 1)] == pairs[2 * i]) CHECK(ids[i - 1] < ids[i]);
  }
  /* Every entry kept with its size and id: size = begin / 16 + id. */
  uint8_t *seen = calloc(n ? n : 1, 1);
  CHECK(seen);
  for (size_t i = 0; i < n; i++) {
    CHECK(ids[i] < n && !seen[ids[i]]);
    seen[ids[i]] = 1;
    CHECK(pairs[2 * i + 1] == pairs[2 * i] / 16 + ids[i]);
  }
  free(seen);
}

/* m entries anywhere (some equal to a map entry), then n - m rising. */
static void run(size_t n, size_t m, int damaged) {
  uint64_t *pairs = calloc(2 * (n ? n : 1), sizeof(*pairs));
  uint32_t *ids = calloc(n ? n : 1, sizeof(*ids));
  CHECK(pairs && ids);
  uint64_t addr = 0x10000;
  for (size_t j = m; j < n; j++) {
    addr += 16 * (1 + test_random() % 8);
    pairs[2 * j] = addr;
  }
  for (size_t i = 0; i < m; i++)
    pairs[2 * i] = (n > m && test_random() % 4 == 0) ? pairs[2 * (m + test_random() % (n - m))]
                                               : 0x10000 + 16 * (test_random() % (8 * n + 1));
  if (damaged && n - m >= 2) {
    size_t j = m + test_random() % (n - m - 1);
    uint64_t t = pairs[2 * j];
    pairs[2 * j] = pairs[2 * (j + 1)];
    pairs[2 * (j + 1)] = t;
    if (pairs[2 * j] == pairs[2 * (j + 1)]) pairs[2 * j] += 16;
  }
  for (size_t i = 0; i < n; i++) {
    ids[i] = (uint32_t)i;
    pairs[2 * i + 1] = pairs[2 * i] / 16 + i;
  }
  CHECK(ur_entries_order(pairs, ids, n, m) == 0);
  check_sorted(pairs, ids, n);
  free(pairs);
  free(ids);
}

/* The snapshot child's layout (ur_entries_order_maps_first): n - m rising
 * entries first, then m anywhere (some equal to a map entry, many above
 * them all, as blocks mmap'ed alone lie above the heap). Ids number the
 * shards' entries first, so ties come out as ur_entries_order puts them. */
static void run_maps_first(size_t n, size_t m, int damaged) {
  uint64_t *pairs = calloc(2 * (n ? n : 1), sizeof(*pairs));
  uint32_t *ids = calloc(n ? n : 1, sizeof(*ids));
  CHECK(pairs && ids);
  size_t k = n - m;
  uint64_t addr = 0x10000;
  for (size_t j = 0; j < k; j++) {
    addr += 16 * (1 + test_random() % 8);
    pairs[2 * j] = addr;
  }
  for (size_t i = k; i < n; i++) {
    unsigned pick = test_random() % 4;
    if (k && pick == 0) pairs[2 * i] = pairs[2 * (test_random() % k)];
    else if (pick == 1) pairs[2 * i] = 0x10000 + 16 * (test_random() % (8 * n + 1));
    else pairs[2 * i] = addr + 16 * (1 + test_random() % (8 * n + 1));
  }
  if (damaged && k >= 2) {
    size_t j = test_random() % (k - 1);
    uint64_t t = pairs[2 * j];
    pairs[2 * j] = pairs[2 * (j + 1)];
    pairs[2 * (j + 1)] = t;
    if (pairs[2 * j] == pairs[2 * (j + 1)]) pairs[2 * j] += 16;
  }
  for (size_t i = 0; i < n; i++) {
    ids[i] = (uint32_t)(i < k ? m + i : i - k);
    pairs[2 * i + 1] = pairs[2 * i] / 16 + ids[i];
  }
  CHECK(ur_entries_order_maps_first(pairs, ids, n, k) == 0);
  check_sorted(pairs, ids, n);
  free(pairs);
  free(ids);
}

static void radix_in_order(void) {
  enum { N = 5000 };
  uint64_t *keys = malloc(N * sizeof(*keys));
  uint32_t *vals = malloc(N * sizeof(*vals));
  CHECK(keys && vals);
  for (size_t i = 0; i < N; i++) keys[i] = 1000 + 3 * (i / 2), vals[i] = (uint32_t)i;
  CHECK(ur_radix_sort(keys, vals, N) == 0);
  for (size_t i = 0; i < N; i++) CHECK(keys[i] == 1000 + 3 * (i / 2) && vals[i] == i);
  /* Out of order only at the very end: still sorted, stably. */
  keys[N - 1] = 0;
  CHECK(ur_radix_sort(keys, vals, N) == 0);
  CHECK(keys[0] == 0 && vals[0] == N - 1);
  for (size_t i = 1; i < N; i++) CHECK(keys[i - 1] <= keys[i] && vals[i] == i - 1);
  free(keys);
  free(vals);
}

static void maps_by_base(void) {
  enum { N = 300 };
  struct ur_size_map_ref refs[N];
  for (size_t i = 0; i < N; i++) refs[i] = (struct ur_size_map_ref){.base = (test_random() % 100000) << 20};
  uint32_t *order;
  CHECK(ur_size_map_order(refs, N, &order) == 0);
  for (size_t k = 1; k < N; k++) CHECK(refs[order[k - 1]].base <= refs[order[k]].base);
  ur_big_free(order);
  CHECK(ur_size_map_order(refs, 0, &order) == 0);
  ur_big_free(order);
}

/* Shards' tables and size maps that overlap are forged; touching ones,
 * and shards or refs without a table or map, are not. */
static void forged_registries(void) {
  struct ur_shard shards[3] = {{.table = 0x10000, .capacity = 16},
                               {.table = 0x10100, .capacity = 4},
                               {.table = 0, .capacity = 0}};
  CHECK_EQ(ur_registry_forged(shards, 3, NULL, 0), 0); /* end to end: 16 entries are 0x100 bytes */
  shards[1].table = 0x100f0;
  CHECK_EQ(ur_registry_forged(shards, 3, NULL, 0), UR_FORGED_TABLES);
  shards[1].table = 0x10000; /* the same table twice */
  CHECK_EQ(ur_registry_forged(shards, 3, NULL, 0), UR_FORGED_TABLES);
  shards[1] = (struct ur_shard){.table = UINT64_MAX - 0x10, .capacity = 4}; /* wraps */
  CHECK_EQ(ur_registry_forged(shards, 3, NULL, 0), UR_FORGED_TABLES);
  const uint64_t span = UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT;
  struct ur_size_map_ref refs[3] = {{.base = 5 * span, .map = 0x100000},
                                    {.base = 6 * span, .map = 0x100000 + UR_SIZE_MAP_BYTES},
                                    {.base = 5 * span, .map = 0}};
  CHECK_EQ(ur_registry_forged(NULL, 0, refs, 3), 0);
  refs[1].base = 5 * span; /* one base twice */
  CHECK_EQ(ur_registry_forged(NULL, 0, refs, 3), UR_FORGED_MAPS);
  refs[1].base = 6 * span + 4096; /* not a span's */
  CHECK_EQ(ur_registry_forged(NULL, 0, refs, 3), UR_FORGED_MAPS);
  refs[1] = (struct ur_size_map_ref){.base = 6 * span, .map = 0x100000 + 4096}; /* maps overlap */
  CHECK_EQ(ur_registry_forged(NULL, 0, refs, 3), UR_FORGED_MAPS);
  CHECK_EQ(ur_registry_forged(NULL, 0, NULL, 0), 0);
}

int main(void) {
  run(0, 0, 0);
  run(1, 1, 0);
  run(1, 0, 0);
  for (int round = 0; round < 30; round++) {
    size_t n = 2 + test_random() % 5000, m = test_random() % (n + 1);
    run(n, m, 0);
    run(n, 0, 0);
    run(n, n, 0);
    run(n, m, 1);
    run_maps_first(n, m, 0);
    run_maps_first(n, 0, 0);
    run_maps_first(n, n, 0);
    run_maps_first(n, m, 1);
  }
  run_maps_first(0, 0, 0);
  run_maps_first(1, 1, 0);
  run_maps_first(1, 0, 0);
  radix_in_order();
  maps_by_base();
  forged_registries();
  printf("ok entry_order\n");
  return 0;
}
