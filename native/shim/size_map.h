/*
 * Size maps (abi.h): the registry's home for most blocks. A block's entry is
 * at an address computed from its own and its size's level, so registering
 * it is one store and unregistering it a load or up to three (the levels in
 * turn: free does not know the size) and a store, with no hashing, probing,
 * counters or shard ownership: an aligned store is whole for a stopped
 * reader, and no two blocks share an entry (abi.h), so threads never
 * contend for one. The hash shards (registry.c) keep what a map cannot
 * hold: blocks with a stack id, sizes over UR_SIZE_MAP_MAX_SIZE, addresses
 * that are not 16-aligned or lie above 2^47.
 *
 * The shim finds a map through a two-level directory (address bits 30-46,
 * then 20-29), on the hot paths after a table of hints (ur_size_map_hints);
 * readers use the list of refs in struct ur_size_maps instead.
 */
#ifndef UR_SIZE_MAP_H
#define UR_SIZE_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

#define UR_SIZE_DIR_TOP_BITS 17u /* address bits 30..46 */
#define UR_SIZE_DIR_MID_BITS 10u /* address bits 20..29 */

typedef uint8_t *ur_size_map_mid[1u << UR_SIZE_DIR_MID_BITS];

/* The top level, from the shim's region; NULL until ur_size_maps_init. */
extern ur_size_map_mid **ur_size_dir;

int ur_size_maps_init(void);

/* The address readers use (descriptor.size_maps). */
struct ur_size_maps *ur_size_maps_header(void);

/* Whether a block may live in a map (the rest go to the shards). */
static inline int ur_size_map_fits(uint64_t addr, uint64_t size, uint32_t stack_id) {
  return ((addr & 15) | (addr >> 47) | stack_id) == 0 && size <= UR_SIZE_MAP_MAX_SIZE;
}

/* The map of addr's 1 MiB through the directory, or NULL while it does not exist. */
static inline uint8_t *ur_size_map_in_dir(uint64_t addr) {
  ur_size_map_mid *mid = __atomic_load_n(&ur_size_dir[addr >> 30], __ATOMIC_ACQUIRE);
  if (UR_UNLIKELY(mid == NULL)) return NULL;
  return __atomic_load_n(&(*mid)[(addr >> 20) & ((1u << UR_SIZE_DIR_MID_BITS) - 1)],
                         __ATOMIC_ACQUIRE);
}

/* A direct-mapped table in the shim's data, one entry per 1 MiB of address
 * space modulo UR_SIZE_MAP_HINTS, naming the first map made for a MiB that
 * lands on it: the hot paths find most maps with one load from a line they
 * touch on every call, instead of three dependent loads from the
 * directory's pages (each a TLB miss as often as not on a large heap,
 * which stalls the map store behind it). An entry is written once (map,
 * then tag with a release store) and never changes: maps are never freed
 * or moved, so a tag that matches names the right map forever.
 *
 * The tag is the MiB's base address and is compared with the address less
 * its bits 4-19, so one compare also rules out an address that is not
 * 16-aligned (its low bits survive) or lies above 2^47 (no map is made
 * there): a hit fits a map. An empty entry's tag (UR_SIZE_MAP_NO_HINT) has
 * bits 4-19 set, which no masked address has. */
#define UR_SIZE_MAP_HINTS 1024u
#define UR_SIZE_MAP_NO_HINT UINT64_MAX
struct ur_size_map_hint {
  uint64_t tag; /* base of the map's MiB; UR_SIZE_MAP_NO_HINT: empty */
  uint8_t *map;
};
/* hidden: addressed from the instruction pointer, not through the GOT */
extern struct ur_size_map_hint ur_size_map_hints[UR_SIZE_MAP_HINTS]
    __attribute__((visibility("hidden")));

static inline struct ur_size_map_hint *ur_size_map_hint_of(uint64_t addr) {
  /* (addr >> 20) % UR_SIZE_MAP_HINTS entries of 16 bytes, as one shift and mask */
  return (struct ur_size_map_hint *)(void *)((char *)ur_size_map_hints +
                                             ((addr >> 16) & ((UR_SIZE_MAP_HINTS - 1) << 4)));
}

/* The map of addr's 1 MiB, or NULL while it does not exist or addr does not
 * fit a map (ur_size_map_fits without the size). */
static inline uint8_t *ur_size_map_of(uint64_t addr) {
  const struct ur_size_map_hint *h = ur_size_map_hint_of(addr);
  if (UR_LIKELY(__atomic_load_n(&h->tag, __ATOMIC_ACQUIRE) == (addr & ~UINT64_C(0xffff0)))) {
    uint8_t *map = h->map;
    if (map == NULL) __builtin_unreachable(); /* set before the tag: callers skip their test */
    return map;
  }
  if (!ur_size_map_fits(addr, 0, 0)) return NULL;
  return ur_size_map_in_dir(addr);
}

/* addr's entry in each level of map, the map of addr's 1 MiB. */
static inline uint8_t *ur_size_map_l0(uint8_t *map, uint64_t addr) {
  return map + ((addr >> UR_SIZE_MAP_L0_SHIFT) & (UR_SIZE_MAP_L0_ENTRIES - 1));
}
static inline uint16_t *ur_size_map_l1(uint8_t *map, uint64_t addr) {
  return (uint16_t *)(void *)(map + UR_SIZE_MAP_L1_OFFSET) +
         ((addr >> UR_SIZE_MAP_L1_SHIFT) & (UR_SIZE_MAP_L1_ENTRIES - 1));
}
static inline uint32_t *ur_size_map_l2(uint8_t *map, uint64_t addr) {
  return (uint32_t *)(void *)(map + UR_SIZE_MAP_L2_OFFSET) +
         ((addr >> UR_SIZE_MAP_L2_SHIFT) & (UR_SIZE_MAP_L2_ENTRIES - 1));
}

/* The level of a size that fits a map. */
static inline int ur_size_map_level(uint64_t size) {
  return size <= UR_SIZE_MAP_L0_MAX_SIZE ? 0 : size <= UR_SIZE_MAP_L1_MAX_SIZE ? 1 : 2;
}

/* Register the block (addr, size) that fits a map in map: one store. */
static inline void ur_size_map_put(uint8_t *map, uint64_t addr, uint64_t size) {
  uint32_t off = (uint32_t)(addr >> 4);
  if (UR_LIKELY(size <= UR_SIZE_MAP_L0_MAX_SIZE))
    __atomic_store_n(ur_size_map_l0(map, addr), (uint8_t)(size + 1), __ATOMIC_RELEASE);
  else if (size <= UR_SIZE_MAP_L1_MAX_SIZE)
    __atomic_store_n(ur_size_map_l1(map, addr), (uint16_t)((off & 15) << 12 | size),
                     __ATOMIC_RELEASE);
  else
    __atomic_store_n(ur_size_map_l2(map, addr), (off & 255) << 24 | (uint32_t)size,
                     __ATOMIC_RELEASE);
}

/* The level (0-2) of the block registered at addr in map, with its size, or
 * -1: none begins there. A level-1 or -2 entry is the block at addr when
 * its offset is addr's in the granule. */
static inline int ur_size_map_find_in(uint8_t *map, uint64_t addr, uint64_t *size) {
  uint8_t v0 = __atomic_load_n(ur_size_map_l0(map, addr), __ATOMIC_RELAXED);
  if (UR_LIKELY(v0 != 0)) {
    *size = ur_size_map_l0_size(v0);
    return 0;
  }
  uint32_t off = (uint32_t)(addr >> 4);
  uint16_t v1 = __atomic_load_n(ur_size_map_l1(map, addr), __ATOMIC_RELAXED);
  if (v1 != 0 && (uint32_t)(v1 >> 12) == (off & 15)) {
    *size = ur_size_map_l1_size(v1);
    return 1;
  }
  uint32_t v2 = __atomic_load_n(ur_size_map_l2(map, addr), __ATOMIC_RELAXED);
  if (v2 != 0 && (v2 >> 24) == (off & 255)) {
    *size = ur_size_map_l2_size(v2);
    return 2;
  }
  return -1;
}

/* Empty addr's entry of a level find_in returned. */
static inline void ur_size_map_clear(uint8_t *map, uint64_t addr, int level) {
  if (level == 0) __atomic_store_n(ur_size_map_l0(map, addr), 0, __ATOMIC_RELEASE);
  else if (level == 1) __atomic_store_n(ur_size_map_l1(map, addr), 0, __ATOMIC_RELEASE);
  else __atomic_store_n(ur_size_map_l2(map, addr), 0, __ATOMIC_RELEASE);
}

/* free's removal of the block at addr, registered in map or not (whether
 * it was). Free does not know the size, and looking at the levels in turn
 * mispredicts a branch on most frees of a heap of mixed sizes; glibc's
 * chunk header, the word before addr that __libc_free reads next, names
 * the level instead (its chunk size: at most 256 bytes for level 0, 4096
 * for level 1), decided as soon as that load returns. The entry it names
 * must still hold the block; when it does not (a pointer not at a chunk of
 * that size: memalign, a realloc that kept a larger chunk, mmapped chunks
 * under a lowered threshold), the levels are looked at in turn.
 *
 * A chunk of at most 256 bytes holds at most 248 requested: its block is
 * in level 0 or in a shard, and while no block of that size is in a shard
 * (ur_g.small_in_shards) its level-0 entry is emptied without being read
 * first. That is safe whatever addr is: a level-0 entry belongs only to a
 * block beginning at its granule, so it is addr's or already empty. The
 * load it saves missed the cache on most frees of a large heap, and a store
 * that misses does not hold up the instructions after it. */
static inline int ur_size_map_take(uint8_t *map, uint64_t addr) {
  uint64_t chunk = *(const volatile uint64_t *)(uintptr_t)(addr - 8) & ~UINT64_C(7);
  uint32_t off = (uint32_t)(addr >> 4);
  if (chunk <= 256) {
    uint8_t *e = ur_size_map_l0(map, addr);
    if (UR_LIKELY(!__atomic_load_n(&ur_g.small_in_shards, __ATOMIC_RELAXED))) {
      __atomic_store_n(e, 0, __ATOMIC_RELEASE);
      return 1;
    }
    if (UR_LIKELY(__atomic_load_n(e, __ATOMIC_RELAXED) != 0)) {
      __atomic_store_n(e, 0, __ATOMIC_RELEASE);
      return 1;
    }
  } else if (chunk <= 4096) {
    uint16_t *e = ur_size_map_l1(map, addr);
    uint16_t v = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (UR_LIKELY(v != 0 && (uint32_t)(v >> 12) == (off & 15))) {
      __atomic_store_n(e, 0, __ATOMIC_RELEASE);
      return 1;
    }
  } else {
    uint32_t *e = ur_size_map_l2(map, addr);
    uint32_t v = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (UR_LIKELY(v != 0 && (v >> 24) == (off & 255))) {
      __atomic_store_n(e, 0, __ATOMIC_RELEASE);
      return 1;
    }
  }
  uint64_t size;
  int level = ur_size_map_find_in(map, addr, &size);
  if (level >= 0) ur_size_map_clear(map, addr, level);
  return level >= 0;
}

/* The map holding the block at addr if it is registered in one (then it is
 * in no shard), with its level and size, else NULL. */
static inline uint8_t *ur_size_map_registered(uint64_t addr, int *level, uint64_t *size) {
  uint8_t *m = ur_size_map_of(addr);
  if (UR_UNLIKELY(m == NULL)) return NULL;
  *level = ur_size_map_find_in(m, addr, size);
  return *level >= 0 ? m : NULL;
}

/* The map for addr, making it if need be; NULL when the shim's region or
 * the ref list is full (the block then goes to a shard). */
uint8_t *ur_size_map_make(uint64_t addr);

/* Walk the live entries of every map whose piece of address space meets
 * [lo, hi): fn gets (mangled key, size, stack id 0) for blocks beginning in
 * [lo, hi). Nothing is locked: entries change under a walk unless the caller
 * stops them (malloc_disable, or a frozen copy). Returns the entries seen. */
typedef void (*ur_size_map_fn)(uint64_t key, uint64_t size, uint32_t stack_id, void *arg);
size_t ur_size_maps_foreach(uint64_t lo, uint64_t hi, ur_size_map_fn fn, void *arg);

/* Live entries in every map (exact only when nothing moves). */
uint64_t ur_size_maps_count(void);

/* fork child: the lock may have been copied held. */
void ur_size_maps_after_fork_child(void);

/* Giving back the pages of maps that hold no entry (give_back.c): maps
 * listed; the resident pages of map r (in list order) that hold no entry
 * now, as a mask of its 4 KiB pages (0 on other page sizes), with the
 * bytes of its resident pages in *resident; and those of
 * `pages` that still hold none, given back (MADV_DONTNEED), in bytes. The
 * last is only safe while no thread can be registering a block (the gate
 * held): a page found empty could otherwise get an entry just before it is
 * dropped. */
uint64_t ur_size_maps_listed(void);
#define UR_SIZE_MAP_PAGES ((UR_SIZE_MAP_BYTES + 4095u) / 4096u) /* of 4 KiB */
#define UR_SIZE_MAP_ALLOC ((size_t)UR_SIZE_MAP_PAGES * 4096u)    /* a map's bytes in the region */
uint32_t ur_size_map_empty_pages(uint64_t r, size_t *resident);
/* One page of map r: 1 resident and empty, 0 resident with entries, -1 not resident. */
int ur_size_map_page_empty(uint64_t r, unsigned page);
size_t ur_size_map_release_pages(uint64_t r, uint32_t pages);

#endif
