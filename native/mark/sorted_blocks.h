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

/* What the sizes are: the shim's registry holds the sizes asked for; a
 * walk of glibc's heap without the shim holds its chunks' usable sizes
 * (malloc_usable_size). */
enum ur_sizes { UR_SIZES_REQUESTED = 0, UR_SIZES_USABLE = 1 };

/* The mark's one rule for what refers to a block: any value in
 * [begin, begin + size], its interior and the pointer one past its end (C
 * lets a program keep an array by its end, and free it through end - 1;
 * PHP keeps every function's arg_info so). For a zero-size block that is
 * its own address. Blocks may touch: a value that is both one block's end
 * and the next one's begin is the next one's (every lookup takes the last
 * block beginning at or below the value). Under glibc it never is: every
 * block's user pointer follows its own chunk's size word.
 * Usable sizes end where a request filling its chunk ends (then the next
 * chunk's size word, ending on 8 and never on a page), or, for a chunk
 * mmap'ed alone before glibc 2.43, at its mapping's end, which no request
 * reaches (it ends at least 8 bytes short) and where a value is the next
 * mapping's start: such an end is not one past anything. */
static inline uint64_t ur_block_reach(const uint64_t *pairs, size_t i, enum ur_sizes sizes) {
  uint64_t b = pairs[2 * i], s = pairs[2 * i + 1];
  uint64_t past = sizes == UR_SIZES_USABLE && s && !((b + s) & 4095) ? 0 : 1;
  return b + s + past <= b ? UINT64_MAX : b + s + past;
}

#define UR_PAGE_UNKNOWN (-2)

static inline uint64_t ur_page_hash(uint64_t key) {
  return (key * UINT64_C(0x9E3779B97F4A7C15)) >> 20;
}

#endif
