#include "region.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "lock.h"
#include "state.h"

/* Pieces are reserved as the shim needs them: the first small, each later
 * one as large as all before it (so few pieces, and at most as much address
 * space reserved as used), up to MAX_PIECE. Under an address-space limit a
 * piece that large may not fit where the bytes asked for do: then just
 * those. PROT_NONE + MAP_NORESERVE costs only address space; pieces are made
 * writable as they are handed out, so strict overcommit still works. */
#define FIRST_PIECE ((size_t)4 << 20)
#define MAX_PIECE ((size_t)1 << 30)

/* descriptor.regions points here; descriptor.num_regions counts them. */
static struct ur_region_span spans[UR_MAX_REGIONS];
#define num_spans unreachable_descriptor.num_regions

static struct {
  uintptr_t begin, end; /* the piece handed out from now */
  uintptr_t next;       /* bump pointer */
  uintptr_t committed;  /* pages below this are read/write */
  size_t commit_step;   /* committed grows to a multiple of this (0: the page size) */
  size_t reserved;      /* every piece's size */
  int error;            /* errno of the last failed mmap or mprotect */
  int fixed;            /* makes no system call (ur_region_fix): hands out committed pages */
  uint32_t lock;
  void *free_tables[64]; /* by log2(capacity); link in the table's first word */
} region;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Under region.lock: a new piece with room for size bytes at 64-byte
 * alignment, made current (the last one's rest is not used again). */
static int add_piece(size_t size) {
  if (num_spans == UR_MAX_REGIONS || region.fixed) {
    region.error = region.fixed ? EPERM : ENOMEM;
    return -1;
  }
  size_t step = region.commit_step ? region.commit_step : page_size();
  size_t need = (size + step - 1) & ~(step - 1);
  size_t want = region.reserved < FIRST_PIECE ? FIRST_PIECE
                : region.reserved > MAX_PIECE ? MAX_PIECE
                                              : region.reserved;
  if (want < need) want = need;
  void *p = mmap(NULL, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED && want > need) {
    want = need;
    p = mmap(NULL, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  if (p == MAP_FAILED) {
    region.error = errno;
    return -1;
  }
  /* The size maps take an eighth of a heap of small blocks; on 4 KiB pages
   * their page tables would cost a fork snapshot as much time as a heap an
   * eighth as big on them. */
  if (region.commit_step > page_size()) madvise(p, want, MADV_HUGEPAGE);
  region.begin = region.next = region.committed = (uintptr_t)p;
  region.end = (uintptr_t)p + want;
  region.reserved += want;
  spans[num_spans].begin = region.begin;
  spans[num_spans].end = region.end;
  __atomic_store_n(&num_spans, num_spans + 1, __ATOMIC_RELEASE);
  return 0;
}

int ur_region_init(void) {
  unreachable_descriptor.regions = (uint64_t)(uintptr_t)spans;
  int saved = errno;
  int r = add_piece(FIRST_PIECE);
  if (r == 0) errno = saved;
  else errno = region.error;
  return r;
}

/* The region's lock, unless this thread holds it: then the caller is a
 * signal handler's call nested in its own thread's use of the region, which
 * would wait on itself for ever, and goes without (region.h). */
static int lock_region(void) { return ur_tid_lock(&region.lock, ur_self_tid()); }

void *ur_region_alloc(size_t size) {
  if (!lock_region()) return NULL;
  int saved = errno;
  /* A page or more starts on a page: its pages can be given back whole
   * (the size maps', give_back.c). */
  uintptr_t align = size >= page_size() ? page_size() : 64;
  uintptr_t p = (region.next + align - 1) & ~(align - 1);
  void *out = NULL;
  if (region.begin && (p > region.end || size > region.end - p) && add_piece(size) == 0)
    p = region.next; /* a fresh piece: page aligned */
  if (region.begin && p <= region.end && size <= region.end - p) {
    uintptr_t end = p + size;
    if (end > region.committed && !region.fixed) {
      size_t ps = region.commit_step ? region.commit_step : page_size();
      uintptr_t new_committed = (end + ps - 1) & ~(uintptr_t)(ps - 1);
      if (new_committed > region.end) new_committed = region.end;
      if (mprotect((void *)region.committed, new_committed - region.committed,
                   PROT_READ | PROT_WRITE) == 0)
        region.committed = new_committed;
      else
        region.error = errno; /* strict overcommit: no commit charge left */
    }
    if (end <= region.committed) {
      region.next = end;
      out = (void *)p;
    }
  }
  ur_unlock(&region.lock, 1);
  errno = saved;
  return out; /* fresh pages are zero: a piece only grows */
}

void *ur_region_alloc_unshared(size_t size) {
  if (__atomic_load_n(&region.fixed, __ATOMIC_RELAXED)) return NULL; /* no madvise */
  size_t ps = page_size();
  size = (size + ps - 1) & ~(ps - 1);
  void *p = ur_region_alloc(size); /* a page or more starts on a page */
  /* The range becomes a mapping of its own: a page or two of address
   * space lost with it if the kernel refuses. */
  if (p && madvise(p, size, MADV_WIPEONFORK) != 0) return NULL;
  return p;
}

/* Read/write from region.committed up to the piece's end, or as much of it
 * as the kernel grants (strict overcommit: halves until it fits). */
static void commit_rest(void) {
  size_t step = region.commit_step ? region.commit_step : page_size();
  size_t len = region.end - region.committed;
  while (len >= step && mprotect((void *)region.committed, len, PROT_READ | PROT_WRITE) != 0) {
    region.error = errno;
    len = (len / 2) & ~(step - 1);
  }
  if (len >= step) region.committed += len;
}

void ur_region_fix(void) {
  /* A signal handler's call nested in this thread's use of the region:
   * fixed with the room there is. */
  int locked = lock_region();
  int saved = errno;
  if (locked && !region.fixed && region.begin) {
    /* Room for the registry to about double: the current piece's rest, or
     * a fresh piece as large as all before when that rest is small. */
    if (region.end - region.next < region.reserved / 4) add_piece(1);
    commit_rest();
  }
  __atomic_store_n(&region.fixed, 1, __ATOMIC_RELAXED);
  if (locked) ur_unlock(&region.lock, 1);
  errno = saved;
}

int ur_region_fixed(void) { return __atomic_load_n(&region.fixed, __ATOMIC_RELAXED); }

void ur_region_use_huge_pages(void) {
  /* Whole 2 MiB steps, so every range the kernel could back with a huge
   * page is read/write when first touched; later pieces are advised as
   * they are made. */
  if (madvise((void *)region.begin, region.end - region.begin, MADV_HUGEPAGE) == 0)
    region.commit_step = (size_t)2 << 20;
}

static unsigned log2u(uint64_t v) { return 63u - (unsigned)__builtin_clzll(v); }

void *ur_region_table_get(uint64_t capacity) {
  size_t bytes = capacity * sizeof(struct ur_entry);
  unsigned cls = log2u(capacity);
  if (!lock_region()) return NULL;
  void *t = region.free_tables[cls];
  if (t) region.free_tables[cls] = *(void **)t;
  ur_unlock(&region.lock, 1);
  if (!t) return ur_region_alloc(bytes);
  memset(t, 0, bytes);
  return t;
}

void ur_region_table_put(void *table, uint64_t capacity) {
  size_t bytes = capacity * sizeof(struct ur_entry);
  size_t ps = page_size();
  /* Give the physical pages back; keep the first page (it holds the link). */
  uintptr_t lo = ((uintptr_t)table + ps + ps - 1) & ~(uintptr_t)(ps - 1);
  uintptr_t hi = ((uintptr_t)table + bytes) & ~(uintptr_t)(ps - 1);
  /* Under the program's filter the pages stay: the table is reused. */
  if (hi > lo && !__atomic_load_n(&region.fixed, __ATOMIC_RELAXED))
    madvise((void *)lo, hi - lo, MADV_DONTNEED);
  unsigned cls = log2u(capacity);
  if (!lock_region()) return; /* the table stays in the region, never reused */
  *(void **)table = region.free_tables[cls];
  region.free_tables[cls] = table;
  ur_unlock(&region.lock, 1);
}

int ur_region_held_here(void) { return ur_lock_holder(&region.lock) == ur_self_tid(); }

uintptr_t ur_region_begin(void) { return (uintptr_t)spans[0].begin; }
uintptr_t ur_region_end(void) { return (uintptr_t)spans[0].end; }

int ur_region_error(void) { return region.error; }

int ur_region_contains(uint64_t addr, uint64_t len) {
  uint64_t n = __atomic_load_n(&num_spans, __ATOMIC_ACQUIRE);
  for (uint64_t i = n; i-- > 0;)
    if (addr >= spans[i].begin && addr <= spans[i].end && len <= spans[i].end - addr) return 1;
  return 0;
}

void ur_region_after_fork_child(void) {
  region.lock = 0;
}
