/*
 * The mark core alone (native/mark heap_walker over the snapshot child's
 * direct-load backend), on the heap shapes of bench/heap_target.c, built in
 * this process: no target, no fork, no Python, so a change to the mark can
 * be compared run against run without the noise of the rest of a scan.
 *
 * Usage: mark_bench NBLOCKS BLOCK_SIZE [tree|list] [ROUNDS] [THREADS]
 * THREADS > 1 marks as the snapshot child does with that many (raw clones).
 * Prints: memcpy_gbps mark_ms mark_gbps ratio marked
 * (best of ROUNDS for both; memcpy copies as many bytes as the heap holds).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heap_shape.h"
#include "heap_walker.h"
#include "mem_direct.h"
#include "raw_thread.h"
#include "readable_ranges.h"

#define MAX_RANGES 4096

void *g_root;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  size_t n = strtoull(argv[1], NULL, 0), size = strtoull(argv[2], NULL, 0);
  int list = argc > 3 && strcmp(argv[3], "list") == 0;
  int rounds = argc > 4 ? atoi(argv[4]) : 7;
  unsigned threads = argc > 5 ? (unsigned)atoi(argv[5]) : 1;
  if (n < 10 || size < 16 || threads < 1 || threads > 16) return 2;
  uint64_t *pairs = malloc(n * 2 * sizeof(*pairs));
  if (!pairs || !(g_root = heap_shape_make(n, size, list, pairs))) return 1;
  size_t total = n * size;
  char *src = malloc(total), *dst = malloc(total);
  if (!src || !dst) return 1;
  memset(src, 1, total);
  memset(dst, 2, total);
  static uint64_t ranges[2 * MAX_RANGES];
  size_t nranges = readable_ranges(ranges, MAX_RANGES);
  uint64_t root[2] = {(uint64_t)(uintptr_t)&g_root, (uint64_t)(uintptr_t)&g_root + 8};
  double best_copy = 1e9, best_mark = 1e9;
  uint64_t scanned = 0;
  size_t marked = 0;
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    memcpy(dst, src, total);
    double t1 = now();
    if (t1 - t0 < best_copy) best_copy = t1 - t0;
    struct ur_direct_mem m[16];
    struct ur_mem *mems[16];
    for (unsigned k = 0; k < threads; k++) {
      if (ur_direct_open(&m[k], ranges, nranges) != 0) return 1;
      mems[k] = &m[k].mem;
    }
    struct ur_walker w;
    if (ur_walker_init(&w, mems[0], pairs, n, UR_SIZES_REQUESTED) != 0) return 1;
    struct ur_raw_threads team = {.n = 0};
    const struct ur_team_ops ops = {ur_raw_thread_start, ur_raw_thread_join, &team};
    t0 = now();
    if (ur_walker_mark_team(&w, mems, threads, &ops, root, 1, NULL, 0) != 0) return 1;
    t1 = now();
    if (t1 - t0 < best_mark) best_mark = t1 - t0;
    scanned = w.bytes_scanned;
    marked = 0;
    for (size_t i = 0; i < w.n; i++) marked += w.marked[i];
    ur_walker_free(&w);
    for (unsigned k = 0; k < threads; k++) ur_direct_close(&m[k]);
  }
  double copy_gbps = (double)total / best_copy / 1e9, mark_gbps = (double)scanned / best_mark / 1e9;
  printf("%.2f %.2f %.2f %.3f %zu\n", copy_gbps, best_mark * 1e3, mark_gbps, mark_gbps / copy_gbps,
         marked);
  return dst[total / 2] == 1 ? 0 : 1;
}
