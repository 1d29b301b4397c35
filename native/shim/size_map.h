/*
 * Size maps (abi.h): the registry's home for most blocks. A block's entry is
 * the uint16_t at an address computed from its own, so registering it is one
 * store and unregistering it a load and a store, with no hashing, probing,
 * counters or shard ownership: an aligned 2-byte store is whole for a stopped
 * reader, and no two blocks begin in the same 16 bytes, so threads never
 * contend for an entry. The hash shards (registry.c) keep what a map cannot
 * hold: blocks with a stack id, sizes over UR_SIZE_MAP_MAX_SIZE, addresses
 * that are not 16-aligned or lie above 2^47.
 *
 * The shim finds a map through a two-level directory (address bits 30-46,
 * then 20-29); readers use the list of refs in struct ur_size_maps instead.
 */
#ifndef UR_SIZE_MAP_H
#define UR_SIZE_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

#define UR_SIZE_DIR_TOP_BITS 17u /* address bits 30..46 */
#define UR_SIZE_DIR_MID_BITS 10u /* address bits 20..29 */

typedef uint16_t *ur_size_map_mid[1u << UR_SIZE_DIR_MID_BITS];

/* The top level, from the shim's region; NULL until ur_size_maps_init. */
extern ur_size_map_mid **ur_size_dir;

int ur_size_maps_init(void);

/* The address readers use (descriptor.size_maps). */
struct ur_size_maps *ur_size_maps_header(void);

/* Whether a block may live in a map (the rest go to the shards). */
static inline int ur_size_map_fits(uint64_t addr, uint64_t size, uint32_t stack_id) {
  return ((addr & 15) | (addr >> 47) | stack_id) == 0 && size <= UR_SIZE_MAP_MAX_SIZE;
}

/* addr's entry in map, the map of addr's 1 MiB. */
static inline uint16_t *ur_size_map_entry_in(uint16_t *map, uint64_t addr) {
  return map + ((addr >> UR_SIZE_MAP_GRANULE_SHIFT) & (UR_SIZE_MAP_ENTRIES - 1));
}

/* The entry for addr, or NULL while its map does not exist (addr fits). */
static inline uint16_t *ur_size_map_slot(uint64_t addr) {
  ur_size_map_mid *mid = __atomic_load_n(&ur_size_dir[addr >> 30], __ATOMIC_ACQUIRE);
  if (UR_UNLIKELY(mid == NULL)) return NULL;
  uint16_t *map = __atomic_load_n(&(*mid)[(addr >> 20) & ((1u << UR_SIZE_DIR_MID_BITS) - 1)],
                                  __ATOMIC_ACQUIRE);
  if (UR_UNLIKELY(map == NULL)) return NULL;
  return ur_size_map_entry_in(map, addr);
}

/* The block at addr's entry if it is registered in a map (then it is in no
 * shard), else NULL. */
static inline uint16_t *ur_size_map_registered(uint64_t addr) {
  if (!ur_size_map_fits(addr, 0, 0)) return NULL;
  uint16_t *m = ur_size_map_slot(addr);
  return UR_LIKELY(m != NULL) && UR_LIKELY(__atomic_load_n(m, __ATOMIC_RELAXED) != 0) ? m : NULL;
}

/* The entry for addr, making its map if need be; NULL when the shim's region
 * or the ref list is full (the block then goes to a shard). */
uint16_t *ur_size_map_slot_make(uint64_t addr);

static inline void ur_size_map_put(uint16_t *e, uint64_t size) {
  __atomic_store_n(e, (uint16_t)(size + 1), __ATOMIC_RELEASE);
}

static inline void ur_size_map_clear(uint16_t *e) { __atomic_store_n(e, 0, __ATOMIC_RELEASE); }

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
uint32_t ur_size_map_empty_pages(uint64_t r, size_t *resident);
/* One page of map r: 1 resident and empty, 0 resident with entries, -1 not resident. */
int ur_size_map_page_empty(uint64_t r, unsigned page);
size_t ur_size_map_release_pages(uint64_t r, uint32_t pages);

#endif
