/*
 * The registry of live allocations: UR_NUM_SHARDS open-addressing tables keyed
 * by the mangled user pointer, laid out exactly as abi.h's ur_shard/ur_entry so
 * the scanner reads them straight out of a stopped target.
 */
#ifndef UR_REGISTRY_H
#define UR_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "shim.h"

_Static_assert(UR_NUM_SHARDS == 256, "ur_shard_of takes the shard from the top 8 hash bits");

int ur_registry_init(void);

/* Register a block glibc has just handed out. */
void ur_registry_insert(const void *p, size_t size, uint32_t stack_id);

/* Update the entry if present (realloc in place), else insert. */
void ur_registry_set(const void *p, size_t size, uint32_t stack_id);

/* Returns 1 if the pointer was registered. */
int ur_registry_remove(const void *p);

/* Remove and return what was registered (1), or 0 if p was not registered. */
int ur_registry_take(const void *p, uint64_t *size, uint32_t *stack_id);

/* Look up one pointer; returns 1 and fills size/stack_id if present. */
int ur_registry_find(const void *p, uint64_t *size, uint32_t *stack_id);

static inline struct ur_shard *ur_shard_of(uint64_t addr, uint64_t *hash) {
  /* The shard comes from the 1 MiB region the block lies in: glibc gives
   * threads their own arenas, so threads mostly work on disjoint shards and
   * their lock words do not bounce between cores. The table index comes from
   * the whole address (Fibonacci hashing: the top bits are the good ones). */
  *hash = (addr >> 4) * UINT64_C(0x9E3779B97F4A7C15);
  return &ur_g.shards[((addr >> 20) * UINT64_C(0x9E3779B97F4A7C15)) >> 56];
}

/* Lock or unlock every shard (malloc_disable, fork). */
void ur_registry_lock_all(uint32_t tid);
void ur_registry_unlock_all(void);
/* fork child: locks were copied in whatever state; nobody else exists now. */
void ur_registry_reset_locks(uint32_t owner_tid);

#endif
