#include "size_map.h"

#include <sys/mman.h>
#include <unistd.h>

#include "lock.h"
#include "region.h"

/* One map per 1 MiB of address space a process ever allocates in: 2^16 of
 * them (64 GiB of heap) in a list of 1 MiB. Past that, blocks go to the
 * shards. */
#define MAX_REFS UR_SIZE_MAP_MAX_REFS
#define MAP_BYTES UR_SIZE_MAP_ALLOC

ur_size_map_mid **ur_size_dir;
/* Empty from the start (in .data): a lookup before ur_init finds no hint. */
struct ur_size_map_hint ur_size_map_hints[UR_SIZE_MAP_HINTS] = {
    [0 ... UR_SIZE_MAP_HINTS - 1] = {UR_SIZE_MAP_NO_HINT, NULL}};

/* In the region, as everything the descriptor points to. */
static struct ur_size_maps *header;
/* The holder's tid (lock.h ur_tid_lock): a signal handler's call nested in
 * this thread's own making of a map finds it held by its own thread. */
static uint32_t make_lock;

int ur_size_maps_init(void) {
  ur_size_dir = ur_region_alloc(sizeof(*ur_size_dir) << UR_SIZE_DIR_TOP_BITS);
  header = ur_region_alloc(sizeof *header);
  return ur_size_dir && header ? 0 : -1;
}

struct ur_size_maps *ur_size_maps_header(void) { return header; }

/* Under make_lock: the map for addr, made and published if missing. */
static uint8_t *make_map(uint64_t addr) {
  ur_size_map_mid **top = &ur_size_dir[addr >> 30];
  ur_size_map_mid *mid = *top;
  if (!mid) {
    mid = ur_region_alloc(sizeof *mid);
    if (!mid) return NULL;
    __atomic_store_n(top, mid, __ATOMIC_RELEASE);
  }
  uint8_t **slot = &(*mid)[(addr >> 20) & ((1u << UR_SIZE_DIR_MID_BITS) - 1)];
  if (*slot) return *slot;
  if (!header->refs) {
    void *refs = ur_region_alloc(MAX_REFS * sizeof(struct ur_size_map_ref));
    if (!refs) return NULL;
    header->capacity = MAX_REFS;
    __atomic_store_n(&header->refs, (uint64_t)(uintptr_t)refs, __ATOMIC_RELEASE);
  }
  if (header->count >= header->capacity) return NULL;
  uint8_t *map = ur_region_alloc(MAP_BYTES); /* page aligned: its pages can be given back */
  if (!map) return NULL;
  /* Listed before the shim can put an entry in it, so a reader that has the
   * list has every entry. */
  struct ur_size_map_ref *ref = (struct ur_size_map_ref *)(uintptr_t)header->refs + header->count;
  ref->base = addr & ~((UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT) - 1);
  ref->map = (uint64_t)(uintptr_t)map;
  __atomic_store_n(&header->count, header->count + 1, __ATOMIC_RELEASE);
  __atomic_store_n(slot, map, __ATOMIC_RELEASE);
  struct ur_size_map_hint *h = ur_size_map_hint_of(addr);
  if (h->tag == UR_SIZE_MAP_NO_HINT) { /* first come keeps it: a tag that matches is never taken back */
    h->map = map;
    __atomic_store_n(&h->tag, ref->base, __ATOMIC_RELEASE);
  }
  return map;
}

uint8_t *ur_size_map_make(uint64_t addr) {
  uint8_t *m = ur_size_map_of(addr);
  if (m) return m;
  /* Taken even by the thread holding every lock (malloc_disable, fork),
   * which may allocate: it is never held across anything that allocates.
   * Held by this very thread, the caller is a signal handler's call nested
   * in make_map, which waited on itself for ever: it gets no map, and its
   * block goes to a shard (registry.c map_for), as when a map cannot be made. */
  if (!ur_tid_lock(&make_lock, ur_self_tid())) return NULL;
  uint8_t *map = make_map(addr);
  ur_tid_unlock(&make_lock);
  return map;
}

size_t ur_size_maps_foreach(uint64_t lo, uint64_t hi, ur_size_map_fn fn, void *arg) {
  if (!header) return 0;
  uint64_t n = __atomic_load_n(&header->count, __ATOMIC_ACQUIRE);
  const struct ur_size_map_ref *refs = (const struct ur_size_map_ref *)(uintptr_t)header->refs;
  size_t seen = 0;
  for (uint64_t r = 0; r < n; r++) {
    uint64_t base = refs[r].base, end = base + (UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT);
    if (end <= lo || base >= hi) continue;
    const uint8_t *map = (const uint8_t *)(uintptr_t)refs[r].map;
    const uint64_t *words = (const uint64_t *)(const void *)map;
    for (uint32_t w = 0; w < UR_SIZE_MAP_L0_ENTRIES / 8; w++) {
      uint64_t eight = __atomic_load_n(&words[w], __ATOMIC_RELAXED);
      for (uint32_t k = 0; eight; k++, eight >>= 8) {
        uint8_t v = (uint8_t)eight;
        uint64_t addr = ur_size_map_l0_block(base, 8 * w + k);
        if (!v || addr < lo || addr >= hi) continue;
        fn(UR_MANGLE(addr), ur_size_map_l0_size(v), 0, arg);
        seen++;
      }
    }
    const uint16_t *l1 = (const uint16_t *)(const void *)(map + UR_SIZE_MAP_L1_OFFSET);
    for (uint32_t i = 0; i < UR_SIZE_MAP_L1_ENTRIES; i++) {
      uint16_t v = __atomic_load_n(&l1[i], __ATOMIC_RELAXED);
      uint64_t addr = ur_size_map_l1_block(base, i, v);
      if (!v || addr < lo || addr >= hi) continue;
      fn(UR_MANGLE(addr), ur_size_map_l1_size(v), 0, arg);
      seen++;
    }
    const uint32_t *l2 = (const uint32_t *)(const void *)(map + UR_SIZE_MAP_L2_OFFSET);
    for (uint32_t i = 0; i < UR_SIZE_MAP_L2_ENTRIES; i++) {
      uint32_t v = __atomic_load_n(&l2[i], __ATOMIC_RELAXED);
      uint64_t addr = ur_size_map_l2_block(base, i, v);
      if (!v || addr < lo || addr >= hi) continue;
      fn(UR_MANGLE(addr), ur_size_map_l2_size(v), 0, arg);
      seen++;
    }
  }
  return seen;
}

static void count_one(uint64_t key, uint64_t size, uint32_t stack_id, void *arg) {
  (void)key, (void)size, (void)stack_id;
  ++*(uint64_t *)arg;
}

uint64_t ur_size_maps_count(void) {
  uint64_t n = 0;
  ur_size_maps_foreach(0, UINT64_MAX, count_one, &n);
  return n;
}

void ur_size_maps_after_fork_child(void) { make_lock = 0; }

/* ---- giving pages back (give_back.c) ------------------------------------ */

#define PAGE 4096u
#define MAP_PAGES (MAP_BYTES / PAGE)
_Static_assert(MAP_PAGES <= 32, "a map's pages fit a uint32_t mask");

uint64_t ur_size_maps_listed(void) {
  return header ? __atomic_load_n(&header->count, __ATOMIC_ACQUIRE) : 0;
}

static uint8_t *map_of(uint64_t r) {
  const struct ur_size_map_ref *refs = (const struct ur_size_map_ref *)(uintptr_t)header->refs;
  return (uint8_t *)(uintptr_t)refs[r].map;
}

static int page_empty(const uint8_t *page) {
  const uint64_t *w = (const uint64_t *)page;
  for (unsigned i = 0; i < PAGE / 8; i += 4)
    if (__atomic_load_n(&w[i], __ATOMIC_RELAXED) | __atomic_load_n(&w[i + 1], __ATOMIC_RELAXED) |
        __atomic_load_n(&w[i + 2], __ATOMIC_RELAXED) | __atomic_load_n(&w[i + 3], __ATOMIC_RELAXED))
      return 0;
  return 1;
}

uint32_t ur_size_map_empty_pages(uint64_t r, size_t *resident) {
  *resident = 0;
  if ((size_t)sysconf(_SC_PAGESIZE) != PAGE || r >= ur_size_maps_listed()) return 0;
  uint8_t *map = map_of(r);
  /* Only resident pages: reading one that is not would map the zero page. */
  unsigned char vec[MAP_PAGES];
  if (mincore(map, MAP_BYTES, vec) != 0) return 0;
  uint32_t mask = 0;
  for (unsigned i = 0; i < MAP_PAGES; i++) {
    if (!(vec[i] & 1)) continue;
    *resident += PAGE;
    if (page_empty(map + i * PAGE)) mask |= UINT32_C(1) << i;
  }
  return mask;
}

int ur_size_map_page_empty(uint64_t r, unsigned page) {
  if ((size_t)sysconf(_SC_PAGESIZE) != PAGE || r >= ur_size_maps_listed() || page >= MAP_PAGES)
    return -1;
  uint8_t *p = map_of(r) + page * PAGE;
  unsigned char in;
  if (mincore(p, PAGE, &in) != 0 || !(in & 1)) return -1;
  return page_empty(p);
}

size_t ur_size_map_release_pages(uint64_t r, uint32_t pages) {
  uint8_t *map = map_of(r);
  size_t given = 0;
  for (unsigned i = 0; i < MAP_PAGES;) {
    unsigned j = i;
    while (j < MAP_PAGES && (pages >> j & 1) && page_empty(map + j * PAGE)) j++;
    if (j > i) {
      /* The page reads as zero again and is charged nothing until written. */
      if (madvise(map + i * PAGE, (size_t)(j - i) * PAGE, MADV_DONTNEED) == 0)
        given += (size_t)(j - i) * PAGE;
      i = j;
    } else {
      i++;
    }
  }
  return given;
}
