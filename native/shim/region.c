#include "region.h"

#include <string.h>
#include <sys/mman.h>

#include "lock.h"
#include "unreachable/abi.h"

/* PROT_NONE + MAP_NORESERVE costs only address space; pieces are made
 * writable as they are handed out, so strict overcommit still works. */
static const size_t reserve_sizes[] = {(size_t)64 << 30, (size_t)16 << 30, (size_t)4 << 30,
                                       (size_t)1 << 30};

static struct {
  uintptr_t begin, end;
  uintptr_t next;      /* bump pointer */
  uintptr_t committed; /* pages below this are read/write */
  size_t commit_step;  /* committed grows to a multiple of this (0: the page size) */
  uint32_t lock, owner;
  void *free_tables[64]; /* by log2(capacity); link in the table's first word */
} region;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

int ur_region_init(void) {
  for (size_t i = 0; i < sizeof reserve_sizes / sizeof reserve_sizes[0]; i++) {
    void *p = mmap(NULL, reserve_sizes[i], PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      region.begin = region.next = region.committed = (uintptr_t)p;
      region.end = (uintptr_t)p + reserve_sizes[i];
      return 0;
    }
  }
  return -1;
}

void *ur_region_alloc(size_t size) {
  uint32_t tid = ur_self_tid();
  ur_lock_hard(&region.lock, &region.owner, tid);
  uintptr_t p = (region.next + 63) & ~(uintptr_t)63;
  void *out = NULL;
  if (region.begin && size <= region.end - p) {
    uintptr_t end = p + size;
    if (end > region.committed) {
      size_t ps = region.commit_step ? region.commit_step : page_size();
      uintptr_t new_committed = (end + ps - 1) & ~(uintptr_t)(ps - 1);
      if (new_committed > region.end) new_committed = region.end;
      if (mprotect((void *)region.committed, new_committed - region.committed,
                   PROT_READ | PROT_WRITE) == 0)
        region.committed = new_committed;
    }
    if (end <= region.committed) {
      region.next = end;
      out = (void *)p;
    }
  }
  ur_unlock(&region.lock, &region.owner, 1);
  return out; /* fresh pages are zero: the region only grows */
}

void ur_region_use_huge_pages(void) {
  /* The size maps take an eighth of a heap of small blocks; on 4 KiB pages
   * their page tables would cost a fork snapshot as much time as a heap an
   * eighth as big on them. Whole 2 MiB steps, so every range the kernel
   * could back with a huge page is read/write when first touched. */
  if (madvise((void *)region.begin, region.end - region.begin, MADV_HUGEPAGE) == 0)
    region.commit_step = (size_t)2 << 20;
}

static unsigned log2u(uint64_t v) { return 63u - (unsigned)__builtin_clzll(v); }

void *ur_region_table_get(uint64_t capacity) {
  size_t bytes = capacity * sizeof(struct ur_entry);
  unsigned cls = log2u(capacity);
  uint32_t tid = ur_self_tid();
  ur_lock_hard(&region.lock, &region.owner, tid);
  void *t = region.free_tables[cls];
  if (t) region.free_tables[cls] = *(void **)t;
  ur_unlock(&region.lock, &region.owner, 1);
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
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
  unsigned cls = log2u(capacity);
  uint32_t tid = ur_self_tid();
  ur_lock_hard(&region.lock, &region.owner, tid);
  *(void **)table = region.free_tables[cls];
  region.free_tables[cls] = table;
  ur_unlock(&region.lock, &region.owner, 1);
}

uintptr_t ur_region_begin(void) { return region.begin; }
uintptr_t ur_region_end(void) { return region.end; }

void ur_region_after_fork_child(void) {
  region.lock = 0;
  region.owner = 0;
}
