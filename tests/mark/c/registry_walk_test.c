/* native/mark/registry_walk.h's counts under ASan+UBSan
 * (tests/mark/test_registry_walk_c.py): ur_nonzero_bytes, which sizes the
 * size maps' decoding by counting a word's nonzero bytes with one multiply,
 * against a byte-by-byte count; ur_size_map_live against the entries
 * ur_size_map_collect emits from a map of every level; and
 * ur_size_map_collect_held, which reads level 0 only in the pages it is
 * given, against the whole walk of the map with the other pages zero. */
#include <stdlib.h>
#include <string.h>

#include "registry_walk.h"
#include "unit_test.h"

static unsigned nonzero_slowly(uint64_t w) {
  unsigned n = 0;
  for (unsigned b = 0; b < 8; b++) n += ((w >> (8 * b)) & 0xff) != 0;
  return n;
}

static void nonzero_bytes(void) {
  CHECK_EQ(ur_nonzero_bytes(0), 0);
  CHECK_EQ(ur_nonzero_bytes(~UINT64_C(0)), 8);
  /* Every byte value in every place, alone: the top bit alone, the low
   * seven alone, both. */
  for (unsigned v = 0; v < 256; v++)
    for (unsigned b = 0; b < 8; b++) CHECK_EQ(ur_nonzero_bytes((uint64_t)v << (8 * b)), v != 0);
  /* Random words with random bytes cleared, or kept to their top or
   * bottom bits. */
  for (int i = 0; i < 200000; i++) {
    uint64_t w = test_random(), clear = test_random();
    for (unsigned b = 0; b < 8; b++)
      if ((clear >> b) & 1) w &= ~(UINT64_C(0xff) << (8 * b));
    if (i % 3 == 1) w &= UINT64_C(0x8080808080808080);
    if (i % 3 == 2) w &= UINT64_C(0x0101010101010101);
    CHECK_EQ(ur_nonzero_bytes(w), nonzero_slowly(w));
  }
}

static void map_live_matches_collect(void) {
  uint8_t *map = calloc(1, UR_SIZE_MAP_BYTES);
  size_t room = UR_SIZE_MAP_MAX_LIVE;
  uint64_t *pairs = calloc(2 * room, sizeof(*pairs));
  CHECK(map && pairs);
  uint16_t *l1 = (uint16_t *)(void *)(map + UR_SIZE_MAP_L1_OFFSET);
  uint32_t *l2 = (uint32_t *)(void *)(map + UR_SIZE_MAP_L2_OFFSET);
  for (int round = 0; round < 4; round++) {
    memset(map, 0, UR_SIZE_MAP_BYTES);
    /* Level-0 entries of every density, up to every granule of a stretch;
     * a few level-1 and level-2 entries. Their blocks may overlap: the
     * counts are of entries, whatever they describe. */
    size_t want = 0;
    uint32_t every = 1u + (uint32_t)round * 5u;
    for (uint32_t i = 0; i < UR_SIZE_MAP_L0_ENTRIES; i += every)
      if (test_random() % 4) {
        map[i] = (uint8_t)(1 + test_random() % 255);
        want++;
      }
    for (uint32_t i = 0; i < UR_SIZE_MAP_L1_ENTRIES; i += 97) {
      l1[i] = (uint16_t)(1 + test_random() % 0xfffe);
      want++;
    }
    for (uint32_t i = 0; i < UR_SIZE_MAP_L2_ENTRIES; i += 31) {
      l2[i] = (uint32_t)(1 + test_random() % 0xfffffffe);
      want++;
    }
    CHECK_EQ(ur_size_map_live(map), want);
    CHECK_EQ(ur_size_map_collect(map, 0x100000, pairs, NULL), want);
  }
  free(map);
  free(pairs);
}

/* A copy holding some pages of a map: the walk over the pages held, with
 * garbage in the others (a copy's buffer where it holds nothing), emits what
 * the whole walk emits with those pages zero, in the same order. */
static void held_pages_walk_as_zero(void) {
  uint8_t *map = calloc(1, UR_SIZE_MAP_BYTES), *zeroed = calloc(1, UR_SIZE_MAP_BYTES);
  size_t room = UR_SIZE_MAP_MAX_LIVE;
  uint64_t *pairs = calloc(2 * room, sizeof(*pairs)), *want = calloc(2 * room, sizeof(*want));
  CHECK(map && zeroed && pairs && want);
  CHECK_EQ(UR_SIZE_MAP_L0_PAGES, 16);
  uint16_t *l1 = (uint16_t *)(void *)(map + UR_SIZE_MAP_L1_OFFSET);
  uint32_t *l2 = (uint32_t *)(void *)(map + UR_SIZE_MAP_L2_OFFSET);
  for (int round = 0; round < 6; round++) {
    for (uint32_t i = 0; i < UR_SIZE_MAP_L0_ENTRIES; i++)
      map[i] = test_random() % 5 ? 0 : (uint8_t)(1 + test_random() % 15);
    memset(map + UR_SIZE_MAP_L1_OFFSET, 0, UR_SIZE_MAP_BYTES - UR_SIZE_MAP_L1_OFFSET);
    for (uint32_t i = 0; i < UR_SIZE_MAP_L1_ENTRIES; i += 61) l1[i] = (uint16_t)(1 + i % 4000);
    for (uint32_t i = 0; i < UR_SIZE_MAP_L2_ENTRIES; i += 7) l2[i] = 4089 + i;
    uint32_t held = round == 0 ? 0 : round == 1 ? UR_SIZE_MAP_L0_ALL : (uint32_t)test_random();
    held &= UR_SIZE_MAP_L0_ALL;
    memcpy(zeroed, map, UR_SIZE_MAP_BYTES);
    for (uint32_t p = 0; p < UR_SIZE_MAP_L0_PAGES; p++)
      if (!(held & (UINT32_C(1) << p))) memset(zeroed + p * 4096, 0, 4096);
    size_t n = ur_size_map_collect(zeroed, 0x7f0000000000, want, NULL);
    CHECK_EQ(ur_size_map_collect_held(map, 0x7f0000000000, pairs, NULL, held), n);
    CHECK(memcmp(pairs, want, 2 * n * sizeof(*pairs)) == 0);
  }
  free(map);
  free(zeroed);
  free(pairs);
  free(want);
}

int main(void) {
  nonzero_bytes();
  map_live_matches_collect();
  held_pages_walk_as_zero();
  printf("ok registry_walk\n");
  return 0;
}
