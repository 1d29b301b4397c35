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
 * keys are "no entry".
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

/* Upper bound on live entries (the shards' counts), for sizing. */
static inline uint64_t ur_registry_expected(const struct ur_shard *shards, uint32_t n) {
  uint64_t total = 0;
  for (uint32_t s = 0; s < n; s++)
    if (shards[s].count < UR_REGISTRY_MAX_CAPACITY) total += shards[s].count;
  return total;
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

/* ---- size maps (abi.h v3) ---- */

#define UR_SIZE_MAP_MAX_REFS (UINT64_C(1) << 24)

/* The live entries of one map (uint16_t[UR_SIZE_MAP_ENTRIES] covering
 * [base, base + 1 MiB)). Most of a map is zero, so it is read four entries
 * a load and a zero word costs one test. */
static inline size_t ur_size_map_live(const uint16_t *map) {
  const uint64_t *w = (const uint64_t *)(const void *)map;
  size_t n = 0;
  for (uint32_t i = 0; i < UR_SIZE_MAP_ENTRIES / 4; i++)
    for (uint64_t four = w[i]; four; four >>= 16) n += (uint16_t)four != 0;
  return n;
}

/* Appends one map's live entries as (begin, size) pairs in address order,
 * with stack id 0 (ids may be NULL); room for ur_size_map_live(map) is the
 * caller's. Returns how many. */
static inline size_t ur_size_map_collect(const uint16_t *map, uint64_t base, uint64_t *pairs,
                                         uint32_t *ids) {
  const uint64_t *w = (const uint64_t *)(const void *)map;
  size_t k = 0;
  for (uint32_t i = 0; i < UR_SIZE_MAP_ENTRIES / 4; i++) {
    uint64_t four = w[i];
    for (uint32_t j = 0; four; j++, four >>= 16) {
      uint16_t v = (uint16_t)four;
      if (!v) continue;
      pairs[2 * k] = ur_size_map_block(base, 4 * i + j);
      pairs[2 * k + 1] = ur_size_map_size(v);
      if (ids) ids[k] = 0;
      k++;
    }
  }
  return k;
}

#endif
