/*
 * The lock-free walk over the shim's registry (abi.h): its shards' tables and
 * its size maps, in one place for both of its readers: the scanner
 * (native/scanner/registry_reader.c, over copies read through /proc/PID/mem)
 * and the forked snapshot child (native/shim/child.c, over its own memory).
 * Built on abi.h's structs only, so a change of the entry layout is a change
 * here.
 *
 * Consistency (abi.h): a shard's table and capacity are published together,
 * an entry's meta (size and stack id) before its key; empty and tombstone
 * keys are "no entry"; a size map entry is one store of its width.
 */
#ifndef UR_MARK_REGISTRY_WALK_H
#define UR_MARK_REGISTRY_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "unreachable/abi.h"

#define UR_REGISTRY_MAX_CAPACITY (UINT64_C(1) << 32)

/* The table of a shard, if it has a sane one. */
static inline int ur_registry_table(const struct ur_shard *s, uint64_t *table, uint64_t *cap) {
  *table = s->table;
  *cap = s->capacity;
  return *table && *cap && *cap <= UR_REGISTRY_MAX_CAPACITY;
}

/* Appends the live entries among e[0, n) as unmangled (begin, size) pairs and
 * stack ids (ids may be NULL); room for n is the caller's. Returns how many. */
static inline size_t ur_registry_collect(const struct ur_entry *e, size_t n, uint64_t *pairs,
                                      uint32_t *ids) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t key = e[i].key;
    if (key == UR_KEY_EMPTY || key == UR_KEY_TOMBSTONE) continue;
    pairs[2 * k] = (uint64_t)UR_UNMANGLE(key);
    uint64_t meta = e[i].meta; /* abi.h v2: size and stack id packed */
    pairs[2 * k + 1] = UR_META_SIZE(meta);
    if (ids) ids[k] = UR_META_STACK_ID(meta);
    k++;
  }
  return k;
}

/* ---- size maps (abi.h v5: three levels) ---- */

/* Pages of a map's level 0 between the one read and the one touched early
 * (a prefetch): in a forked child each page's first load waits for its
 * accessed bit (ref_graph.c's PAGES_AHEAD). 1024 maps of blocks every 256
 * bytes (4.2M) were collected in a forked child in 25-27 ms of CPU instead
 * of 32-35, every 352 bytes in 31-32 instead of 37-38; 4 pages ahead saved
 * about as much, 8 less. */
#define UR_MAP_AHEAD 2

/* The nonzero bytes of a word: bit 7 of each byte set where the byte is
 * not zero, those bits summed into the top byte by one multiply. Not
 * __builtin_popcountll: without -mpopcnt (the baseline x86-64 this builds
 * for) that is a call into libgcc for every nonzero word of the maps. */
static inline unsigned ur_nonzero_bytes(uint64_t w) {
  const uint64_t low7 = UINT64_C(0x7f7f7f7f7f7f7f7f);
  uint64_t top = (((w & low7) + low7) | w) & ~low7;
  return (unsigned)(((top >> 7) * UINT64_C(0x0101010101010101)) >> 56);
}

/* The live entries of one map (UR_SIZE_MAP_BYTES covering [base, base +
 * 1 MiB)). Most of a map is zero, so it is read eight bytes a load. */
static inline size_t ur_size_map_live(const void *map) {
  const uint64_t *w = (const uint64_t *)map;
  size_t n = 0;
  for (uint32_t i = 0; i < UR_SIZE_MAP_BYTES / 8; i++) {
    uint64_t v = w[i];
    if (!v) continue;
    if (i < UR_SIZE_MAP_L1_OFFSET / 8) {
      n += ur_nonzero_bytes(v);
    } else {
      unsigned width = i < UR_SIZE_MAP_L2_OFFSET / 8 ? 16 : 32;
      for (; v; v >>= width) n += (v & (width == 16 ? 0xffffu : 0xffffffffu)) != 0;
    }
  }
  return n;
}

/* Level 0 is UR_SIZE_MAP_L0_PAGES pages; a mask with every one of them. */
#define UR_SIZE_MAP_L0_PAGES (UR_SIZE_MAP_L0_ENTRIES / 4096u)
#define UR_SIZE_MAP_L0_ALL ((UINT32_C(1) << UR_SIZE_MAP_L0_PAGES) - 1)

/* Appends the blocks of one map as (begin, size) pairs in address order,
 * with stack id 0 (ids may be NULL); room for ur_size_map_live(map) is the
 * caller's. Returns how many. The three levels are merged granule by
 * granule: a level-2 block waits (next2) until the walk passes its address,
 * a level-1 block (next1) likewise within its 256 bytes. Level 0 is read
 * only in the pages l0_pages names (bit i: its page i), the others taken
 * as zero: a copy holding a few pages of the maps reads as zero elsewhere,
 * and walking those zeros was most of its decoding. */
static inline size_t ur_size_map_collect_held(const void *map, uint64_t base, uint64_t *pairs,
                                              uint32_t *ids, uint32_t l0_pages) {
  const uint8_t *m = (const uint8_t *)map;
  const uint64_t *l0 = (const uint64_t *)map;
  const uint16_t *l1 = (const uint16_t *)(const void *)(m + UR_SIZE_MAP_L1_OFFSET);
  const uint32_t *l2 = (const uint32_t *)(const void *)(m + UR_SIZE_MAP_L2_OFFSET);
  size_t k = 0;
#define UR_EMIT_(addr, size)           \
  do {                                 \
    pairs[2 * k] = (addr);             \
    pairs[2 * k + 1] = (size);         \
    if (ids) ids[k] = 0;               \
    k++;                               \
  } while (0)
  /* Emit the waiting blocks that begin before `at`, lowest first. */
#define UR_FLUSH_(at)                                              \
  do {                                                             \
    if (next2 < (at) && next2 < next1) {                           \
      UR_EMIT_(next2, size2);                                      \
      next2 = UINT64_MAX;                                          \
    }                                                              \
    if (next1 < (at)) {                                            \
      UR_EMIT_(next1, size1);                                      \
      next1 = UINT64_MAX;                                          \
    }                                                              \
    if (next2 < (at)) {                                            \
      UR_EMIT_(next2, size2);                                      \
      next2 = UINT64_MAX;                                          \
    }                                                              \
  } while (0)
  uint64_t next1 = UINT64_MAX, size1 = 0, next2 = UINT64_MAX, size2 = 0;
  const uint32_t l1_per_l2 = UR_SIZE_MAP_L1_ENTRIES / UR_SIZE_MAP_L2_ENTRIES;
  const uint32_t words_per_l1 = (UR_SIZE_MAP_L0_ENTRIES / UR_SIZE_MAP_L1_ENTRIES) / 8;
  /* Level 0's bytes under one level-2 entry, and how many such stretches
   * make a page: each page of level 0 touches the one UR_MAP_AHEAD on. */
  const uint32_t l0_per_l2 = UR_SIZE_MAP_L0_ENTRIES / UR_SIZE_MAP_L2_ENTRIES;
  const uint32_t l2_per_page = 4096 / l0_per_l2, ahead = UR_MAP_AHEAD * l2_per_page;
  for (uint32_t g2 = 0; g2 < UR_SIZE_MAP_L2_ENTRIES; g2++) {
    if (g2 % l2_per_page == 0 && g2 + ahead < UR_SIZE_MAP_L2_ENTRIES)
      __builtin_prefetch(m + (size_t)(g2 + ahead) * l0_per_l2);
    uint32_t v2 = l2[g2];
    if (v2) {
      next2 = ur_size_map_l2_block(base, g2, v2);
      size2 = ur_size_map_l2_size(v2);
    }
    const uint32_t l0_words = (l0_pages >> (g2 / l2_per_page)) & 1 ? words_per_l1 : 0;
    for (uint32_t g1 = g2 * l1_per_l2; g1 < (g2 + 1) * l1_per_l2; g1++) {
      uint16_t v1 = l1[g1];
      if (v1) {
        next1 = ur_size_map_l1_block(base, g1, v1);
        size1 = ur_size_map_l1_size(v1);
      }
      for (uint32_t w = g1 * words_per_l1; w < g1 * words_per_l1 + l0_words; w++) {
        /* From set byte to set byte by the lowest set bit (bsf, baseline
         * x86-64): one or two bytes of a word are set, and a test of each
         * byte in turn mispredicted about once a block. */
        for (uint64_t eight = l0[w]; eight;) {
          uint32_t j = (uint32_t)__builtin_ctzll(eight) >> 3;
          uint8_t v = (uint8_t)(eight >> (8 * j));
          eight &= ~(UINT64_C(0xff) << (8 * j));
          uint64_t addr = ur_size_map_l0_block(base, 8 * w + j);
          UR_FLUSH_(addr);
          UR_EMIT_(addr, ur_size_map_l0_size(v));
        }
      }
      UR_FLUSH_(base + ((uint64_t)(g1 + 1) << UR_SIZE_MAP_L1_SHIFT));
    }
  }
#undef UR_FLUSH_
#undef UR_EMIT_
  return k;
}

/* Every block of one map (ur_size_map_collect_held with all of level 0). */
static inline size_t ur_size_map_collect(const void *map, uint64_t base, uint64_t *pairs,
                                         uint32_t *ids) {
  return ur_size_map_collect_held(map, base, pairs, ids, UR_SIZE_MAP_L0_ALL);
}

#endif
