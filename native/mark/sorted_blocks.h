#ifndef UR_MARK_SORTED_BLOCKS_H
#define UR_MARK_SORTED_BLOCKS_H

/* What the page index and the run index share, apart so that neither
 * header needs the other's: the blocks they index, the hash of their
 * tables' keys, and the answer of a lookup their table does not cover. */

#include <stddef.h>
#include <stdint.h>

/* Blocks as (begin, size) pairs sorted by begin, none overlapping: the
 * registry's own layout, so that a sorted registry is indexed where it lies
 * instead of copied (a copy of begins and ends took 16 bytes per
 * allocation). ur_block_end is where its bytes end (a zero-size block
 * still owns its address); ur_block_reach where the values that refer to
 * it end. */
static inline uint64_t ur_block_begin(const uint64_t *pairs, size_t i) { return pairs[2 * i]; }
static inline uint64_t ur_block_end(const uint64_t *pairs, size_t i) {
  uint64_t b = pairs[2 * i], s = pairs[2 * i + 1] ? pairs[2 * i + 1] : 1;
  return b + s < b ? UINT64_MAX : b + s;
}

/* The mark's one rule for what refers to a block: any value in
 * [begin, begin + size], its interior and the pointer one past its end (C
 * lets a program keep an array by its end, and free it through end - 1;
 * PHP keeps every function's arg_info so). For a zero-size block that is
 * its own address. Blocks may touch: a value that is both one block's end
 * and the next one's begin is the next one's (every lookup takes the last
 * block beginning at or below the value). Under glibc it never is: every
 * block's user pointer follows its own chunk's size word. */
static inline uint64_t ur_block_reach(const uint64_t *pairs, size_t i) {
  uint64_t b = pairs[2 * i], s = pairs[2 * i + 1];
  return b + s + 1 <= b ? UINT64_MAX : b + s + 1;
}

#define UR_PAGE_UNKNOWN (-2)

static inline uint64_t ur_page_hash(uint64_t key) {
  return (key * UINT64_C(0x9E3779B97F4A7C15)) >> 20;
}

#endif
