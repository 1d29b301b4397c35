/*
 * Target for read_registry/read_stacks: a hand-built registry per abi.h with
 * known contents (tombstones, a duplicate key across shards, a locked shard,
 * size maps with a duplicate of a shard's key, thread slots in every state,
 * stacks). Prints "descriptor=ADDR".
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "unreachable/abi.h"

static struct ur_entry table0[8], table1[4];
static struct ur_shard shards[2];
static struct ur_thread_slot slots[4];
static uint64_t frames[8 * 4];
static uint16_t frame_counts[8];
static uint64_t frame_segments[UR_STACK_SEGMENTS], count_segments[UR_STACK_SEGMENTS];
static struct ur_stack_table stacks;
static uint32_t cmd;
static const char options[] = "backtrace=4 helper=1";
static uint64_t map_low[UR_SIZE_MAP_BYTES / 8], map_high[UR_SIZE_MAP_BYTES / 8];
static struct ur_size_map_ref refs[4];
static struct ur_size_maps maps;
struct ur_descriptor unreachable_descriptor;

/* Entries as abi.h encodes them, at their level's place for addr (in the
 * map over [0, 1 MiB) or [1 GiB, 1 GiB + 1 MiB)). */
static void put0(uint64_t *map, uint64_t addr, uint8_t size) {
  ((uint8_t *)map)[(addr & 0xfffff) >> UR_SIZE_MAP_L0_SHIFT] = (uint8_t)(size + 1);
}
static void put1(uint64_t *map, uint64_t addr, uint16_t size) {
  uint16_t *l1 = (uint16_t *)(void *)((uint8_t *)map + UR_SIZE_MAP_L1_OFFSET);
  l1[(addr & 0xfffff) >> UR_SIZE_MAP_L1_SHIFT] = (uint16_t)(((addr >> 4) & 15) << 12 | size);
}
static void put2(uint64_t *map, uint64_t addr, uint32_t size) {
  uint32_t *l2 = (uint32_t *)(void *)((uint8_t *)map + UR_SIZE_MAP_L2_OFFSET);
  l2[(addr & 0xfffff) >> UR_SIZE_MAP_L2_SHIFT] = (uint32_t)((addr >> 4) & 255) << 24 | size;
}

int main(void) {
  table0[1] = (struct ur_entry){UR_MANGLE(0x1000), UR_META(16, 1)};
  table0[2] = (struct ur_entry){UR_KEY_TOMBSTONE, UR_META(5, 0)};
  table0[5] = (struct ur_entry){UR_MANGLE(0x2000), UR_META(0, 2)};
  table1[0] = (struct ur_entry){UR_MANGLE(0x1000), UR_META(99, 0)}; /* duplicate: dropped */
  table1[3] = (struct ur_entry){UR_MANGLE(0x3000), UR_META(8, 0)};
  shards[0] = (struct ur_shard){0, 0, (uint64_t)(uintptr_t)table0, 8, 2, 1, {0}};
  shards[1] = (struct ur_shard){4242u | 0x80000000u, 0, (uint64_t)(uintptr_t)table1, 4, 2, 0, {0}};
  slots[0] = (struct ur_thread_slot){111, UR_THREAD_LIVE, UR_OP_MALLOC, 0, 0, 0,
                                     UR_MANGLE(0x5000), 7, 0x100, 0x200};
  slots[2] = (struct ur_thread_slot){222, UR_THREAD_EXITED, UR_OP_NONE, 0, 0, 0, 0, 0, 0x300,
                                     0x400};
  slots[3] = (struct ur_thread_slot){333, UR_THREAD_LIVE, UR_OP_FREE, 0, UR_MANGLE(0x6000), 9,
                                     0, 0, 0, 0};
  frame_counts[1] = 2;
  frames[1 * 4 + 0] = 0xaaa;
  frames[1 * 4 + 1] = 0xbbb;
  frame_counts[2] = 4;
  for (int i = 0; i < 4; i++) frames[2 * 4 + i] = (uint64_t)i + 1;
  frame_counts[3] = 1; /* id 3 >= count: not yet published */
  frame_segments[0] = (uint64_t)(uintptr_t)frames; /* segment 0 alone, 8 ids of it */
  count_segments[0] = (uint64_t)(uintptr_t)frame_counts;
  stacks = (struct ur_stack_table){(uint64_t)(uintptr_t)frame_segments,
                                   (uint64_t)(uintptr_t)count_segments, 8, 4, 3, 0};
  /* Maps over [0, 1 MiB) and [1 GiB, 1 GiB + 1 MiB), every level's
   * smallest and largest size, interleaved: the reader merges the levels in
   * address order. 0x3000 is also in shard 1, which the reader reads first:
   * its 8 stays. */
  put0(map_low, 0x3000, 77);
  put0(map_low, 0x4000, 0);
  put0(map_low, 0x4010, UR_SIZE_MAP_L0_MAX_SIZE);
  put1(map_low, 0x8000, UR_SIZE_MAP_L0_MAX_SIZE + 1);
  put2(map_low, 0x8010, UR_SIZE_MAP_L1_MAX_SIZE + 1);
  put0(map_low, 0x8020, 1);
  put2(map_low, 0xff100, UR_SIZE_MAP_MAX_SIZE); /* the last entry of level 2 */
  put1(map_low, 0xfff80, UR_SIZE_MAP_L1_MAX_SIZE); /* ... of level 1 */
  put0(map_low, 0xffff0, 24);                   /* ... of level 0 */
  put0(map_high, 0x40000020, 100);
  refs[0] = (struct ur_size_map_ref){0x40000000, (uint64_t)(uintptr_t)map_high};
  refs[1] = (struct ur_size_map_ref){0, (uint64_t)(uintptr_t)map_low};
  refs[2] = (struct ur_size_map_ref){0x80000000, 0}; /* past count: not read */
  maps = (struct ur_size_maps){(uint64_t)(uintptr_t)refs, 4, 2, 0};
  struct ur_descriptor d;
  memset(&d, 0, sizeof(d));
  d.magic = UR_ABI_MAGIC;
  d.version = UR_ABI_VERSION;
  d.size = sizeof(d);
  d.enabled = 1;
  d.num_shards = 2;
  d.shards = (uint64_t)(uintptr_t)shards;
  d.threads = (uint64_t)(uintptr_t)slots;
  d.max_threads = 4;
  d.helper_tid = 777;
  d.helper_cmd = (uint64_t)(uintptr_t)&cmd;
  d.stacks = (uint64_t)(uintptr_t)&stacks;
  d.region_begin = 0x10000;
  d.region_end = 0x20000;
  d.options = (uint64_t)(uintptr_t)options;
  d.pid = (uint64_t)getpid();
  d.size_maps = (uint64_t)(uintptr_t)&maps;
  static struct ur_region_span spans[3] = {{0x10000, 0x20000}, {0x30000, 0x38000}, {0x50000, 0x60000}};
  d.regions = (uint64_t)(uintptr_t)spans;
  d.num_regions = 2; /* the third is past the count: not read */
  unreachable_descriptor = d;
  printf("descriptor=%p cmd=%p\n", (void *)&unreachable_descriptor, (void *)&cmd);
  fflush(stdout);
  for (;;) pause();
}
