/*
 * The mark core alone on a heap of mixed block sizes, made as
 * bench/programs/peer_heap.c makes it (glibc's malloc, sizes log-uniform
 * between MIN and MAX, each block's first word pointing to the block made
 * before it, one in a thousand dropped, every kept block held by an array
 * that is itself a block), so that the allocation index's choices on the
 * bench's heaps can be compared build against build without a target.
 *
 * Usage: mixed_mark_bench BYTES MIN MAX [ROUNDS]
 * Marks with one thread over direct loads. Prints, best of ROUNDS in CPU
 * time: index_ms mark_ms marked blocks run_chunks pages min_begins buckets
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heap_walker.h"
#include "mem_direct.h"
#include "raw_thread.h"
#include "readable_ranges.h"

#define MAX_RANGES 4096

void *g_live;

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t next(uint64_t *s) { /* xorshift64, as peer_heap.c */
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* peer_heap.c's pick_size. */
static size_t pick_size(uint64_t *s, size_t min, size_t max) {
  if (min == max) return min;
  size_t lo = 63 - (size_t)__builtin_clzll(min), hi = 63 - (size_t)__builtin_clzll(max);
  size_t base = (size_t)1 << (lo + next(s) % (hi - lo + 1));
  size_t sz = base + next(s) % base;
  return sz < min ? min : sz > max ? max : sz;
}

static int by_begin(const void *a, const void *b) {
  const uint64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  size_t bytes = strtoull(argv[1], NULL, 0), min = strtoull(argv[2], NULL, 0);
  size_t max = strtoull(argv[3], NULL, 0);
  int rounds = argc > 4 ? atoi(argv[4]) : 3;
  if (min < 16 || max < min || rounds < 1) return 2;
  size_t cap = bytes / min + 1, n = 0, made = 0;
  void **live = calloc(cap, sizeof(void *));
  uint64_t *pairs = malloc((cap + 1) * 2 * sizeof(uint64_t));
  if (!live || !pairs) return 1;
  uint64_t s = UINT64_C(0x9E3779B97F4A7C15);
  void *prev = NULL;
  while (made < bytes) {
    size_t sz = pick_size(&s, min, max);
    void **b = malloc(sz);
    if (!b) return 1;
    memset(b, 0, sz);
    b[0] = prev;
    made += sz;
    pairs[2 * n] = (uint64_t)(uintptr_t)b;
    pairs[2 * n + 1] = sz;
    n++;
    if (next(&s) % 1000 == 7) continue; /* dropped: nothing points to it */
    prev = b;
    live[n - 1] = b;
  }
  pairs[2 * n] = (uint64_t)(uintptr_t)live;
  pairs[2 * n + 1] = cap * sizeof(void *);
  n++;
  g_live = live;
  qsort(pairs, n, 2 * sizeof(uint64_t), by_begin);
  static uint64_t ranges[2 * MAX_RANGES];
  size_t nranges = readable_ranges(ranges, MAX_RANGES);
  uint64_t root[2] = {(uint64_t)(uintptr_t)&g_live, (uint64_t)(uintptr_t)&g_live + 8};
  double best_index = 1e9, best_mark = 1e9;
  size_t marked = 0;
  struct ur_alloc_index shape = {0};
  for (int r = 0; r < rounds; r++) {
    struct ur_direct_mem m;
    if (ur_direct_open(&m, ranges, nranges) != 0) return 1;
    struct ur_mem *mems[1] = {&m.mem};
    struct ur_walker w;
    double t0 = cpu_now();
    if (ur_walker_init(&w, mems[0], pairs, n, UR_SIZES_REQUESTED) != 0) return 1;
    double t1 = cpu_now();
    struct ur_raw_threads team = {.n = 0};
    const struct ur_team_ops ops = {ur_raw_thread_start, ur_raw_thread_join, &team};
    if (ur_walker_mark_team(&w, mems, 1, &ops, root, 1, NULL, 0) != 0) return 1;
    double t2 = cpu_now();
    if (t1 - t0 < best_index) best_index = t1 - t0;
    if (t2 - t1 < best_mark) best_mark = t2 - t1;
    marked = 0;
    for (size_t i = 0; i < w.n; i++) marked += w.marked[i];
    shape = w.index;
    ur_walker_free(&w);
    ur_direct_close(&m);
  }
  printf("%.1f %.1f %zu %zu %zu %zu %zu %llu\n", best_index * 1e3, best_mark * 1e3, marked, n,
         shape.runs.chunks, shape.pages.pages, shape.pages.min_begins,
         (unsigned long long)(shape.buckets ? shape.bucket_mask + 1 : 0));
  return 0;
}
