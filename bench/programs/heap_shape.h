/*
 * The heap the sweep benchmarks mark (bench/heap_target.c for
 * bench/sweep_bench.py, bench/programs/mark_bench.c for bench/mark_bench.py).
 */
#ifndef UR_BENCH_HEAP_SHAPE_H
#define UR_BENCH_HEAP_SHAPE_H

#include <stddef.h>
#include <stdint.h>

/* malloc n zeroed blocks of size bytes (size >= 16) and link them in random
 * address order: as binary trees (block k of the order points to blocks
 * 2k+1 and 2k+2) or, with list, as one chain, the serial worst case for a
 * marker. The first 90% of the order hang from the returned block; the last
 * 10% are linked among themselves only (leaked). pairs receives each block's
 * (begin, size). NULL if out of memory. */
void *heap_shape_make(size_t n, size_t size, int list, uint64_t *pairs);

#endif
