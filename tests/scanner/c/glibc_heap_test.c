/* native/scanner/glibc_heap.c over a synthetic glibc 2.36 heap: a main
 * arena with a tcache, a fastbin, the unsorted bin; a second arena in a heap
 * of its own; a chunk mmap'ed alone. A 2.42 tcache (bins counting the room
 * left, a large bin) over a main heap of its own. Then each check that must refuse a
 * broken heap, and random corruption, which must be refused or walked,
 * never crash (ASan+UBSan). */
#include <errno.h>
#include <string.h>

#include "glibc_heap.h"
#include "unit_test.h"

#define LIBC 0x7f0000100000ull /* main_arena and mp_ */
#define ARENA (LIBC + 0x1000)
#define MP (LIBC + 0x100)
#define HEAP 0x555500000000ull /* sbrk_base */
#define HEAP_LEN 0x10000ull
#define HB 0x7f0004000000ull /* a second arena's heap, 64 MiB aligned */
#define HB_LEN 0x21000ull
#define MM 0x7f1000000000ull /* a chunk mmap'ed alone */
#define MM_LEN 0x2000ull
#define JUNK 0x7f2000000000ull /* anonymous memory of the program's own */

struct seg {
  uint64_t base;
  uint8_t buf[HB_LEN];
  uint64_t len;
};
static struct seg segs[5];

static size_t read_fn(void *ctx, uint64_t addr, void *buf, size_t len) {
  (void)ctx;
  size_t good = 0;
  uint8_t *out = buf;
  memset(buf, 0, len);
  for (size_t i = 0; i < 5; i++) {
    struct seg *s = &segs[i];
    uint64_t lo = addr > s->base ? addr : s->base;
    uint64_t hi = addr + len < s->base + s->len ? addr + len : s->base + s->len;
    if (lo >= hi) continue;
    memcpy(out + (lo - addr), s->buf + (lo - s->base), hi - lo);
    good += hi - lo;
  }
  return good;
}

static uint8_t *at(uint64_t addr) {
  for (size_t i = 0; i < 5; i++)
    if (addr >= segs[i].base && addr < segs[i].base + segs[i].len)
      return segs[i].buf + (addr - segs[i].base);
  printf("fail: no segment at %#llx\n", (unsigned long long)addr);
  exit(1);
}
static void put64(uint64_t addr, uint64_t v) { memcpy(at(addr), &v, 8); }
static void put32(uint64_t addr, uint32_t v) { memcpy(at(addr), &v, 4); }
static void put16(uint64_t addr, uint16_t v) { memcpy(at(addr), &v, 2); }
static void chunk(uint64_t p, uint64_t size_bits) { put64(p + 8, size_bits); }

/* The chunks of the main heap. */
enum { C_TCACHE = 0, C1 = 0x290, C2 = 0x2c0, C3 = 0x2e0, C4 = 0x320, C5 = 0x350, C6 = 0x370,
       C_TOP = 0x390 };

static void arena_init(uint64_t a, uint64_t next, uint64_t top, uint64_t system_mem) {
  for (unsigned i = 1; i < 128; i++) {
    uint64_t bin = a + 0x70 + (uint64_t)(i - 1) * 16 - 16;
    put64(bin + 16, bin);
    put64(bin + 24, bin);
  }
  put64(a + 0x870, next);
  put64(a + 0x60, top);
  put64(a + 0x888, system_mem);
  put64(a + 0x880, 1);
}

static void build(void) {
  memset(segs, 0, sizeof(segs));
  segs[0].base = LIBC;
  segs[0].len = 0x2000;
  segs[1].base = HEAP;
  segs[1].len = HEAP_LEN;
  segs[2].base = HB;
  segs[2].len = HB_LEN;
  segs[3].base = MM;
  segs[3].len = MM_LEN;
  segs[4].base = JUNK;
  segs[4].len = 0x3000;
  put64(JUNK + 0x1008, 0x3002); /* a page that looks mmapped but runs past its mapping */

  uint64_t arena_b = HB + 0x30;
  /* main heap */
  chunk(HEAP + C_TCACHE, 0x290 | 1);
  chunk(HEAP + C1, 0x30 | 1);
  chunk(HEAP + C2, 0x20 | 1);
  chunk(HEAP + C3, 0x40 | 1);
  chunk(HEAP + C4, 0x30); /* C3 is free: PREV_INUSE clear, prev_size set */
  put64(HEAP + C4, 0x40);
  chunk(HEAP + C5, 0x20 | 1);
  chunk(HEAP + C6, 0x20 | 1);
  chunk(HEAP + C_TOP, (HEAP_LEN - C_TOP) | 1);
  arena_init(ARENA, arena_b, HEAP + C_TOP, HEAP_LEN);
  /* C3 alone in the unsorted bin (bin 1) */
  uint64_t unsorted = ARENA + 0x60;
  put64(unsorted + 16, HEAP + C3);
  put64(unsorted + 24, HEAP + C3);
  put64(HEAP + C3 + 16, unsorted);
  put64(HEAP + C3 + 24, unsorted);
  /* C5 alone in fastbin 0, safe-linked */
  put64(ARENA + 0x10, HEAP + C5);
  put64(HEAP + C5 + 16, 0 ^ ((HEAP + C5 + 16) >> 12));
  /* the main thread's tcache: bin 0 holds C6 then C2 */
  uint64_t tc = HEAP + C_TCACHE + 16;
  put16(tc, 2);
  put64(tc + 0x80, HEAP + C6 + 16);
  put64(HEAP + C6 + 16, (HEAP + C2 + 16) ^ ((HEAP + C6 + 16) >> 12));
  put64(HEAP + C2 + 16, 0 ^ ((HEAP + C2 + 16) >> 12));
  /* mp_ */
  put32(MP + 0x3c, 1);
  put64(MP + 0x50, MM_LEN);
  put64(MP + 0x60, HEAP);
  /* the second arena: its heap_info, then one chunk in use and top */
  put64(HB, arena_b);
  put64(HB + 0x10, HB_LEN);
  put64(HB + 0x18, HB_LEN);
  put64(HB + 0x20, 0x1000);
  arena_init(arena_b, ARENA, HB + 0x920, HB_LEN);
  chunk(HB + 0x8d0, 0x50 | 4 | 1);
  chunk(HB + 0x920, (HB_LEN - 0x920) | 4 | 1);
  /* the chunk mmap'ed alone */
  chunk(MM, MM_LEN | 2);
}

static struct ur_glibc_layout layout;
static uint64_t tcaches[1] = {HEAP + C_TCACHE + 16};
static const uint64_t anon[] = {HB, HB + HB_LEN, MM, MM + MM_LEN, JUNK, JUNK + 0x3000};

static int walk(struct ur_gh_out *out) {
  struct ur_gh_in in = {
      .layout = &layout,
      .read = read_fn,
      .main_arena = ARENA,
      .mp = MP,
      .tcaches = tcaches,
      .ntcaches = 1,
      .anon = anon,
      .nanon = 3,
      .page_size = 0x1000,
  };
  return ur_glibc_heap_walk(&in, out);
}

/* glibc 2.42's tcache: 76 bins of num_slots (the room left of
 * mp_.tcache_count), a 0x300 structure. The main heap alone: the tcache,
 * A in bin 0, B (0x430 bytes) in the first large bin (64), D in use, top. */
enum { T42_A = 0x300, T42_B = 0x320, T42_D = 0x750, T42_TOP = 0x780 };

static void build42(void) {
  memset(segs, 0, sizeof(segs));
  segs[0].base = LIBC;
  segs[0].len = 0x2000;
  segs[1].base = HEAP;
  segs[1].len = HEAP_LEN;
  chunk(HEAP, 0x300 | 1);
  chunk(HEAP + T42_A, 0x20 | 1);
  chunk(HEAP + T42_B, 0x430 | 1);
  chunk(HEAP + T42_D, 0x30 | 1);
  chunk(HEAP + T42_TOP, (HEAP_LEN - T42_TOP) | 1);
  arena_init(ARENA, ARENA, HEAP + T42_TOP, HEAP_LEN);
  put64(MP + 0x60, HEAP);
  put64(MP + 0x78, 7); /* tcache_count */
  uint64_t tc = HEAP + 16;
  for (unsigned i = 0; i < 76; i++) put16(tc + 2 * i, 7);
  put16(tc, 6);
  put16(tc + 2 * 64, 6);
  put64(tc + 0x98, HEAP + T42_A + 16);
  put64(tc + 0x98 + 8 * 64, HEAP + T42_B + 16);
  put64(HEAP + T42_A + 16, 0 ^ ((HEAP + T42_A + 16) >> 12));
  put64(HEAP + T42_B + 16, 0 ^ ((HEAP + T42_B + 16) >> 12));
}

static int walk42(struct ur_gh_out *out) {
  static const uint64_t tc42[1] = {HEAP + 16};
  struct ur_gh_in in = {
      .layout = &layout,
      .read = read_fn,
      .main_arena = ARENA,
      .mp = MP,
      .tcaches = tc42,
      .ntcaches = 1,
      .page_size = 0x1000,
  };
  return ur_glibc_heap_walk(&in, out);
}

static void expect_refused42(const char *needle) {
  struct ur_gh_out out;
  int rc = walk42(&out);
  if (rc != -EPROTO || !strstr(out.error, needle)) {
    printf("fail: 2.42: rc %d, error '%s' (want '%s')\n", rc, out.error, needle);
    exit(1);
  }
  CHECK(out.allocs == NULL);
}

static void test_242(void) {
  CHECK(ur_glibc_layout_for(42, &layout) == 0);
  build42();
  struct ur_gh_out out;
  int rc = walk42(&out);
  if (rc) printf("walk 2.42: %s\n", out.error);
  CHECK(rc == 0);
  const uint64_t want[] = {HEAP + T42_D + 16, 0x28};
  CHECK(out.nallocs == 1 && memcmp(out.allocs, want, sizeof(want)) == 0);
  CHECK(out.stats.free_tcache == 2 && out.stats.internal == 1);
  free(out.allocs);
  build42();
  put16(HEAP + 16, 7); /* bin 0 has all its room, yet lists A */
  expect_refused42("bin 0: entry 0");
  build42();
  put16(HEAP + 16, 9); /* more room than mp_.tcache_count gives */
  expect_refused42("9 slots left of 7");
  build42();
  put64(HEAP + 16 + 0x98 + 8 * 65, HEAP + T42_B + 16); /* B in bin 65 (0x800-0xfff) too */
  put64(HEAP + 16 + 0x98 + 8 * 64, 0);
  put16(HEAP + 16 + 2 * 64, 7);
  put16(HEAP + 16 + 2 * 65, 6);
  expect_refused42("bin 65");
  CHECK(ur_glibc_layout_for(36, &layout) == 0);
}

static void expect_refused(int want, const char *needle) {
  struct ur_gh_out out;
  int rc = walk(&out);
  if (rc != want || !strstr(out.error, needle)) {
    printf("fail: rc %d (want %d), error '%s' (want '%s')\n", rc, want, out.error, needle);
    exit(1);
  }
  CHECK(out.allocs == NULL);
}

int main(void) {
  CHECK(ur_glibc_layout_for(30, &layout) < 0);
  CHECK(ur_glibc_layout_for(44, &layout) < 0);
  CHECK(ur_glibc_layout_for(43, &layout) == 0 && layout.off_next == 0x818 && !layout.nfastbins);
  CHECK(ur_glibc_layout_for(42, &layout) == 0 && layout.tcache_chunk == 0x300);
  test_242();
  CHECK(ur_glibc_layout_for(36, &layout) == 0);

  build();
  struct ur_gh_out out;
  int rc = walk(&out);
  if (rc) printf("walk: %s\n", out.error);
  CHECK(rc == 0);
  const uint64_t want[] = {HEAP + C1 + 16, 0x28, HEAP + C4 + 16, 0x28,
                           HB + 0x8d0 + 16, 0x48, MM + 16, MM_LEN - 16};
  CHECK(out.nallocs == 4);
  CHECK(memcmp(out.allocs, want, sizeof(want)) == 0);
  CHECK(out.stats.arenas == 2 && out.stats.heaps == 1);
  CHECK(out.stats.free_tcache == 2 && out.stats.free_fast == 1 && out.stats.free_binned == 1);
  CHECK(out.stats.mmapped == 1 && out.stats.internal == 1);
  free(out.allocs);

  build();
  put32(ARENA, 1);
  expect_refused(-EBUSY, "locked");
  build();
  chunk(HEAP + C4, 0x38);
  expect_refused(-EPROTO, "bad size");
  build();
  put16(HEAP + C_TCACHE + 16, 3);
  expect_refused(-EPROTO, "count says 3");
  build();
  put32(MP + 0x3c, 2);
  expect_refused(-EPROTO, "mp_ counts 2");
  build();
  put64(ARENA + 0x60 + 16, ARENA + 0x60); /* the unsorted bin emptied: C3 in no bin */
  put64(ARENA + 0x60 + 24, ARENA + 0x60);
  expect_refused(-EPROTO, "1 free chunks, 0 of them in its bins");
  build();
  put64(HEAP + C_TOP + 8, 0x100 | 1);
  expect_refused(-EPROTO, "does not match its 0x10000 bytes of system memory");
  build();
  put64(HB + 0x920 + 8, 0x100 | 4 | 1);
  expect_refused(-EPROTO, "does not end its heap");
  build();
  put64(ARENA + 0x10, HEAP + C4); /* a fastbin naming a chunk in use of another size */
  expect_refused(-EPROTO, "fastbin 0");
  build();
  put64(ARENA + 0x870, ARENA + 0x870); /* a ring that never closes */
  expect_refused(-EPROTO, "arena");
  build();
  put64(HEAP + C6 + 16, (HEAP + C6 + 16) ^ ((HEAP + C6 + 16) >> 12)); /* a tcache cycle */
  expect_refused(-EPROTO, "tcache");

  /* A main arena malloc never initialised (top 0, bins 0) and no other
   * arena: nothing at all, and no complaint. */
  memset(segs[0].buf, 0, segs[0].len);
  memset(segs[3].buf, 0, segs[3].len);
  put64(ARENA + 0x870, ARENA);
  put64(ARENA + 0x880, 1);
  tcaches[0] = 0;
  rc = walk(&out);
  CHECK(rc == 0 && out.nallocs == 0 && out.stats.chunks == 0);
  free(out.allocs);
  tcaches[0] = HEAP + C_TCACHE + 16;

  /* Random damage: refused or walked, never a crash or a read out of bounds. */
  for (int round = 0; round < 3000; round++) {
    build();
    for (int k = 0; k < 1 + (int)(test_random() % 4); k++) {
      struct seg *s = &segs[test_random() % 4];
      uint64_t off = (test_random() % (s->len / 8)) * 8;
      uint64_t v = test_random() % 3 == 0 ? test_random() : s->base + test_random() % s->len;
      memcpy(s->buf + off, &v, 8);
    }
    rc = walk(&out);
    CHECK(rc == 0 || rc == -EPROTO || rc == -EBUSY);
    free(out.allocs);
  }
  printf("ok glibc_heap\n");
  return 0;
}
