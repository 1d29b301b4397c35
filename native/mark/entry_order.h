/*
 * A registry's entries in address order, as both of its readers collect
 * them (native/scanner/registry_reader.c from outside, native/shim/child.c
 * in the snapshot child): first the shards' entries, in hash order, then
 * the size maps' (abi.h v3), which come in address order when the maps are
 * read by base. Most blocks are in the maps, so sorting only the shards'
 * part and merging it in saves the radix passes over all of them (10M
 * entries: ~0.5 s).
 */
#ifndef UR_MARK_ENTRY_ORDER_H
#define UR_MARK_ENTRY_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "unreachable/abi.h"

/* A registry its process overwrote (a heap overflow, a hostile program)
 * must not steer its readers: the shim never gives two shards one table,
 * nor two size maps one base or one map's bytes, so pieces that overlap
 * are forged, and read as they are they multiply one table's entries by
 * the number of shards naming it (the reader's memory and time, and
 * blocks at made-up addresses). Returns UR_FORGED_TABLES or
 * UR_FORGED_MAPS for such a registry (its shards' tables, its size-map
 * refs whose map is not 0), 0 for a sane one, or -ENOMEM. */
#define UR_FORGED_TABLES 1
#define UR_FORGED_MAPS 2
int ur_registry_forged(const struct ur_shard *shards, uint32_t nshards,
                       const struct ur_size_map_ref *refs, uint64_t nrefs);

/* The order in which to read n size maps: by base. *order is
 * ur_big_calloc'ed (the caller frees it). Returns 0 or -ENOMEM. */
int ur_size_map_order(const struct ur_size_map_ref *refs, size_t n, uint32_t **order);

/* Sort n (begin, size) pairs and their ids by begin, stably: [0,
 * sorted_from) in any order, [sorted_from, n) expected in order (checked:
 * else the whole is sorted). Returns 0 or -ENOMEM (arrays untouched). */
int ur_entries_order(uint64_t *pairs, uint32_t *ids, size_t n, size_t sorted_from);

/* The same with the maps' entries first: [0, unsorted_from) expected in
 * order, [unsorted_from, n) in any order; the result is ur_entries_order's
 * for the shards' part put first. The snapshot child collects them so: the
 * shards' entries are few without backtraces and mostly above the heap
 * (blocks mmap'ed alone), and merging them in from the back leaves the
 * maps' entries below the lowest where they lie instead of moving every
 * entry (2.7M entries: 55 MB written once more). */
int ur_entries_order_maps_first(uint64_t *pairs, uint32_t *ids, size_t n, size_t unsorted_from);

#endif
