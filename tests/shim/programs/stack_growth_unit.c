/* The stack table grows a segment at a time (abi.h): its start reserves
 * room for the first segment only, stacks past it land in new segments and
 * are found again (the lock-free lookup across the index's growth), the
 * scanner's way of reading it through the segment directories gives the
 * same frames, and once it may grow no more the stacks past its room are
 * counted as lost, never stored. Built with the shim's sources under
 * ASan/UBSan. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "region.h"
#include "stacks.h"
#include "state.h"
#include "unit_test.h"
#include "shim_globals.h"

#define MAX_FRAMES 16
#define CAPACITY (UINT32_C(1) << 20)
#define STACKS 40000 /* ids up to segment 4 */

/* Stack i: 1 to MAX_FRAMES pcs, distinct for every i. */
static uint32_t make(uint32_t i, uintptr_t *f) {
  uint32_t n = 1 + i % MAX_FRAMES;
  for (uint32_t j = 0; j < n; j++) f[j] = 0x400000 + (uintptr_t)i * 64 + j;
  return n;
}

static uint64_t reserved(void) {
  uint64_t sum = 0;
  const struct ur_region_span *s = (const void *)(uintptr_t)unreachable_descriptor.regions;
  for (uint64_t i = 0; i < unreachable_descriptor.num_regions; i++) sum += s[i].end - s[i].begin;
  return sum;
}

/* As the scanner reads id: its segment's counts and frames. */
static void check_as_scanner(const struct ur_stack_table *t, uint32_t id, const uintptr_t *f,
                             uint32_t n) {
  uint32_t k = ur_stack_segment(id), off = id - ur_stack_segment_base(k);
  const uint64_t *fs = (const uint64_t *)(uintptr_t)t->frames;
  const uint64_t *cs = (const uint64_t *)(uintptr_t)t->frame_counts;
  CHECK(fs[k] && cs[k]);
  CHECK_EQ(((const uint16_t *)(uintptr_t)cs[k])[off], n);
  CHECK(memcmp((const uint64_t *)(uintptr_t)fs[k] + (uint64_t)off * t->max_frames, f,
               n * sizeof *f) == 0);
}

#define THREADS 4
static uint32_t ids[THREADS][STACKS];

/* Every thread interns every stack, each in its own order, while the
 * others add segments and grow the index under it. */
static void *intern_all(void *arg) {
  uintptr_t t = (uintptr_t)arg, f[MAX_FRAMES];
  ur_self_tid();
  static const uint32_t strides[THREADS] = {1, 7, 11, 13};
  for (uint32_t j = 0; j < STACKS; j++) {
    uint32_t i = (uint32_t)((j * (uint64_t)strides[t] + t * 977) % STACKS);
    ids[t][i] = ur_stacks_intern(f, make(i, f));
  }
  return NULL;
}

int main(void) {
  ur_self_tid();
  CHECK(ur_region_init() == 0);
  uint64_t before = reserved();
  CHECK(ur_stacks_init(CAPACITY, MAX_FRAMES) == 0);
  /* The whole capacity would take 146 MiB; its start, its first segment. */
  CHECK(reserved() - before < (UINT64_C(2) << 20));
  struct ur_stack_table *t = ur_g.stacks;
  pthread_t th[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    CHECK(pthread_create(&th[i], NULL, intern_all, (void *)i) == 0);
  for (int i = 0; i < THREADS; i++) CHECK(pthread_join(th[i], NULL) == 0);
  CHECK_EQ(t->count, STACKS + 1); /* each stack once, none lost */
  CHECK_EQ(t->overflowed, 0);
  CHECK(ur_stack_segment(STACKS) == 4);
  uintptr_t f[MAX_FRAMES], out[MAX_FRAMES];
  for (uint32_t i = STACKS; i-- > 0;) {
    uint32_t n = make(i, f), id = ids[0][i];
    CHECK(id >= 1 && id <= STACKS);
    for (int k = 1; k < THREADS; k++) CHECK_EQ(ids[k][i], id); /* one id for all */
    CHECK_EQ(ur_stacks_intern(f, n), id); /* found again, not added */
    CHECK_EQ(ur_stacks_get(id, out, MAX_FRAMES), n);
    CHECK(memcmp(out, f, n * sizeof *f) == 0);
    check_as_scanner(t, id, f, n);
  }
  CHECK_EQ(t->count, STACKS + 1);
  /* Grown as filled: the segments made hold 64K ids, not the million. */
  CHECK(reserved() - before < (UINT64_C(24) << 20));

  /* No more growth: the rest of segment 4 fills, the next stack is lost. */
  ur_stacks_stop_growing();
  uint32_t room = ur_stack_segment_base(5);
  for (uint32_t i = STACKS; i + 1 < room; i++) CHECK_EQ(ur_stacks_intern(f, make(i, f)), i + 1);
  CHECK_EQ(ur_stacks_intern(f, make(room, f)), 0);
  CHECK_EQ(t->overflowed, 1);
  CHECK_EQ(t->count, room);
  CHECK_EQ(ur_stacks_intern(f, make(7, f)), ids[0][7]); /* known stacks are still found */
  printf("OK\n");
  return 0;
}
