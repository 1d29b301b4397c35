#include "memory.h"

#include "alloc.h"
#include "cow.h"
#include "pin_gate.h"
#include "unreachable/linux_compat.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#define DEFAULT_CACHE_BYTES ((uint64_t)1 << 30)

static size_t hash_slot(const struct ur_pread_mem *m, uint64_t base) {
  uint64_t k = (base >> UR_CHUNK_SHIFT) * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(k >> 32) & m->table_mask;
}

static const uint8_t *chunk_view(struct ur_mem *mm, uint64_t addr, uint64_t end, uint64_t *avail);

static void update_room(struct ur_pread_mem *m) { m->mem.room = m->max_chunks - m->used_chunks; }
static int chunk_held(struct ur_mem *mm, uint64_t addr);

static uint64_t cache_budget;

void ur_mem_set_budget(uint64_t bytes) { __atomic_store_n(&cache_budget, bytes, __ATOMIC_RELAXED); }

uint64_t ur_mem_cache_bound(void) {
  uint64_t budget = __atomic_load_n(&cache_budget, __ATOMIC_RELAXED);
  uint64_t avail = 0;
  FILE *f = fopen("/proc/meminfo", "re");
  if (f) {
    char line[128];
    unsigned long long kb;
    while (fgets(line, sizeof(line), f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (uint64_t)kb << 10;
    fclose(f);
  }
  uint64_t bound = avail ? avail / 2 : DEFAULT_CACHE_BYTES;
  return budget && budget < bound ? budget : bound;
}

int ur_mem_open(struct ur_pread_mem *m, pid_t pid, uint64_t cache_bytes) {
  memset(m, 0, sizeof(*m));
  m->fd = -1;
  m->pagemap_fd = -1;
  m->pid = pid;
  m->mem.slow = chunk_view;
  m->mem.holds = chunk_held;
  if (cache_bytes == 0) cache_bytes = DEFAULT_CACHE_BYTES;
  m->max_chunks = (size_t)(cache_bytes >> UR_CHUNK_SHIFT);
  if (m->max_chunks < 4) m->max_chunks = 4;
  update_room(m);
  size_t tsize = 1;
  while (tsize < m->max_chunks * 2) tsize <<= 1;
  m->table_mask = tsize - 1;
  m->table = calloc(tsize, sizeof(*m->table));
  m->chunks = calloc(m->max_chunks, sizeof(*m->chunks));
  /* One reservation for every chunk buffer: huge pages, touched lazily. */
  m->arena = ur_big_reserve(m->max_chunks * UR_CHUNK_SIZE);
  if (!m->table || !m->chunks || !m->arena) {
    ur_mem_close(m);
    return -ENOMEM;
  }
  if (pid == 0) return 0; /* no process: a core file's copy, filled by ur_mem_load_file */
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
  m->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (m->fd < 0) {
    int err = errno;
    ur_mem_close(m);
    return -(err == ENOENT ? ESRCH : err);
  }
  snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
  m->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC); /* without it: /proc/PID/mem only */
  return 0;
}

void ur_mem_close(struct ur_pread_mem *m) {
  ur_big_release(m->arena, m->max_chunks * UR_CHUNK_SIZE);
  free(m->zero_ranges);
  free(m->readable);
  if (m->pagemap_fd >= 0) close(m->pagemap_fd);
  free(m->chunks);
  free(m->table);
  if (m->fd >= 0) close(m->fd);
  memset(m, 0, sizeof(*m));
  m->fd = -1;
  m->pagemap_fd = -1;
}

/* Reads what it can; pages that fail are zeroed and reported through bad (a
 * bitmap indexed by page from addr, may be NULL). addr must be page aligned
 * for the bitmap to be meaningful. */
static size_t read_pages(int fd, uint64_t addr, uint8_t *buf, size_t len, uint64_t *bad,
                         size_t first_page, int *any_bad) {
  size_t pos = 0, good = 0;
  while (pos < len) {
    ssize_t r = -1;
    /* pread's offset is signed; addresses at or above 2^63 cannot be read. */
    if (addr + pos < (UINT64_C(1) << 63)) r = pread(fd, buf + pos, len - pos, (off_t)(addr + pos));
    if (r > 0) {
      pos += (size_t)r;
      good += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    /* The page at pos is unreadable (or beyond the address space): zero it
     * and retry from the next page, since a later mapping may start there. */
    uint64_t page_end = ((addr + pos) | (UR_PAGE_SIZE - 1)) + 1;
    size_t next = (size_t)(page_end - addr);
    if (next > len) next = len;
    memset(buf + pos, 0, next - pos);
    if (bad) {
      size_t page = first_page + (pos >> UR_PAGE_SHIFT);
      bad[page / 64] |= UINT64_C(1) << (page % 64);
    }
    if (any_bad) *any_bad = 1;
    pos = next;
  }
  return good;
}

size_t ur_mem_read_direct(int fd, uint64_t addr, void *buf, size_t len) {
  return read_pages(fd, addr, buf, len, NULL, 0, NULL);
}

/* pagemap's bits (Documentation/admin-guide/mm/pagemap.rst). */
#define PM_PRESENT (UINT64_C(1) << 63)
#define PM_SWAPPED (UINT64_C(1) << 62)
#define PM_FILE (UINT64_C(1) << 61)
#define PM_MMAP_EXCLUSIVE (UINT64_C(1) << 56)

/* The pagemap entries of `pages` pages from addr (at most a chunk's), when
 * process_vm_readv may be tried: the pin gate's token (pin_gate.h), to be
 * left once the read is done, or 0 (read everything through
 * /proc/PID/mem). Tried only while every thread of pid is held stopped: a
 * running process could fork between this read and the pin. */
static int read_entries(int pagemap_fd, pid_t pid, const int *refused, uint64_t addr,
                        size_t pages, uint64_t *pm) {
  if (pagemap_fd < 0 || __atomic_load_n(refused, __ATOMIC_RELAXED)) return 0;
  int token = ur_pin_enter(pid);
  if (!token) return 0;
  size_t want = pages * sizeof(uint64_t);
  off_t at = (off_t)((addr >> UR_PAGE_SHIFT) * sizeof(uint64_t));
  ssize_t r;
  do r = pread(pagemap_fd, pm, want, at);
  while (r < 0 && errno == EINTR);
  if (r == (ssize_t)want) return token;
  ur_pin_leave(token);
  return 0;
}

/* A page process_vm_readv may read: present, anonymous, and mapped by the
 * process alone. Its pin (FOLL_PIN) makes the kernel unshare an anonymous
 * page that is shared copy-on-write: a page shared with a child of the
 * target, or merged by KSM (or a frozen snapshot child's page shared with
 * the target), would be copied into the process. A page it maps alone is
 * pinned as it is, or, once its sharer is gone, taken back by the unshare
 * without a copy. A file's page is left to /proc/PID/mem as before. */
static int pinnable(uint64_t e) {
  return (e & (PM_PRESENT | PM_FILE | PM_MMAP_EXCLUSIVE)) == (PM_PRESENT | PM_MMAP_EXCLUSIVE);
}

/* Where read_span reads from: the process's /proc/PID/mem, its pid for
 * process_vm_readv, set once that is refused, what it read. */
struct live_source {
  int fd;
  pid_t pid;
  int *refused;
  uint64_t *vm_bytes;
};

static struct live_source source_of(const struct ur_pread_mem *m) {
  return (struct live_source){m->fd, m->pid, (int *)&m->vm_read_refused,
                              (uint64_t *)&m->bytes_vm_read};
}

/* The n runs (local, remote) in one process_vm_readv, and the rest of a
 * run it did not finish through /proc/PID/mem: it stops at the first page
 * it cannot read (gone since the pagemap was read). bad's page 0 is at
 * bad_base. Returns the bytes that were readable. */
static size_t pin_runs(struct live_source src, const struct iovec *local,
                       const struct iovec *remote, size_t n, uint64_t bad_base, uint64_t *bad,
                       int *any_bad) {
  ssize_t got = process_vm_readv(src.pid, local, (unsigned long)n, remote, (unsigned long)n, 0);
  if (got < 0) {
    if (errno == EPERM || errno == ENOSYS) __atomic_store_n(src.refused, 1, __ATOMIC_RELAXED);
    got = 0;
  }
  __atomic_fetch_add(src.vm_bytes, (uint64_t)got, __ATOMIC_RELAXED);
  size_t good = (size_t)got, done = (size_t)got;
  for (size_t k = 0; k < n; k++) {
    if (done >= local[k].iov_len) {
      done -= local[k].iov_len;
      continue;
    }
    size_t skip = done & ~(size_t)(UR_PAGE_SIZE - 1);
    good -= done - skip; /* a part of a page counted in got: read again */
    done = 0;
    uint64_t at = (uint64_t)(uintptr_t)remote[k].iov_base + skip;
    good += read_pages(src.fd, at, (uint8_t *)local[k].iov_base + skip, local[k].iov_len - skip,
                       bad, (size_t)((at - bad_base) >> UR_PAGE_SHIFT), any_bad);
  }
  return good;
}

/* read_pages for a page-aligned span of at most a chunk, given its pagemap
 * entries (pm, or NULL: all through /proc/PID/mem): the runs of pages the
 * process maps alone in one process_vm_readv, which copies each page once
 * and looks up 16 at a time, where /proc/PID/mem takes the mmap lock, finds
 * and copies each page twice (through a bounce page) page by page; every
 * other page, and whatever the call did not read, through /proc/PID/mem.
 * Returns the bytes that were readable. */
static size_t read_span(struct live_source src, uint64_t addr, uint8_t *buf, size_t len,
                        uint64_t *bad, size_t first_page, int *any_bad, const uint64_t *pm) {
  if (!pm) return read_pages(src.fd, addr, buf, len, bad, first_page, any_bad);
  struct iovec local[UR_CHUNK_PAGES / 2 + 1], remote[UR_CHUNK_PAGES / 2 + 1];
  size_t n = 0, pages = len >> UR_PAGE_SHIFT, good = 0;
  for (size_t p = 0; p < pages;) {
    int pin = pinnable(pm[p]);
    size_t q = p + 1;
    while (q < pages && pinnable(pm[q]) == pin) q++;
    size_t off = p << UR_PAGE_SHIFT, bytes = (q - p) << UR_PAGE_SHIFT;
    if (pin) {
      local[n] = (struct iovec){buf + off, bytes};
      remote[n] = (struct iovec){(void *)(uintptr_t)(addr + off), bytes};
      n++;
    } else {
      good += read_pages(src.fd, addr + off, buf + off, bytes, bad, first_page + p, any_bad);
    }
    p = q;
  }
  if (!n) return good;
  /* bad's page 0 (wrapping is harmless: only differences are taken) */
  uint64_t bad_base = addr - ((uint64_t)first_page << UR_PAGE_SHIFT);
  return good + pin_runs(src, local, remote, n, bad_base, bad, any_bad);
}

size_t ur_mem_read_live(int fd, int pagemap_fd, pid_t pid, int *refused, uint64_t addr, void *buf,
                        size_t len) {
  uint64_t zero = 0;
  struct live_source src = {fd, pid, refused, &zero};
  uint64_t entries[UR_CHUNK_PAGES];
  uint8_t *out = buf;
  size_t pos = 0, good = 0;
  while (pos < len) {
    uint64_t a = addr + pos, next = (a & ~(UR_CHUNK_SIZE - 1)) + UR_CHUNK_SIZE;
    size_t n = next - a < len - pos ? (size_t)(next - a) : len - pos;
    if ((a & (UR_PAGE_SIZE - 1)) || n < UR_PAGE_SIZE) {
      /* A part of a page at either end. */
      size_t in_page = (size_t)(UR_PAGE_SIZE - (a & (UR_PAGE_SIZE - 1)));
      if (n > in_page) n = in_page;
      good += read_pages(fd, a, out + pos, n, NULL, 0, NULL);
    } else {
      n &= ~(size_t)(UR_PAGE_SIZE - 1);
      size_t pages = n >> UR_PAGE_SHIFT;
      int token = read_entries(pagemap_fd, pid, refused, a, pages, entries);
      good += read_span(src, a, out + pos, n, NULL, 0, NULL, token ? entries : NULL);
      ur_pin_leave(token);
    }
    pos += n;
  }
  return good;
}

static void table_remove(struct ur_pread_mem *m, uint64_t base) {
  size_t i = hash_slot(m, base);
  while (m->table[i]) {
    if (m->chunks[m->table[i] - 1].base == base) break;
    i = (i + 1) & m->table_mask;
  }
  if (!m->table[i]) return;
  m->table[i] = 0;
  /* Backward-shift deletion keeps linear probing free of tombstones. */
  size_t j = i;
  for (;;) {
    j = (j + 1) & m->table_mask;
    if (!m->table[j]) return;
    size_t home = hash_slot(m, m->chunks[m->table[j] - 1].base);
    int movable = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      m->table[i] = m->table[j];
      m->table[j] = 0;
      i = j;
    }
  }
}

/* A slot for base, entered in the table, its bytes not read yet. */
static struct ur_chunk *reserve_chunk(struct ur_pread_mem *m, uint64_t base) {
  struct ur_chunk *c;
  int next = m->last && base == m->last->base + UR_CHUNK_SIZE;
  if (m->used_chunks < m->max_chunks) {
    c = &m->chunks[m->used_chunks];
    c->data = m->arena + m->used_chunks * UR_CHUNK_SIZE;
    c->fresh = 1;
    m->used_chunks++;
    update_room(m);
  } else if (next && m->last->streamed) {
    /* Full, and reading on from a chunk itself entered from the one before
     * it (the graph's pass, a live mark's reads, the roots): that slot,
     * whose buffer was just written and read and is still in the CPU's
     * cache, where the clock's pick was touched a cache's worth of chunks
     * ago: the kernel's copy into it and the mark's reads of it are cheaper
     * (docs/pause.md, "The whole scan's time"). Not from a chunk entered
     * anywhere else: a builder taking another's share from the back reads
     * a piece of it from that chunk across into the next, then goes back
     * to the chunk for the piece before. A full cache keeps no view for a
     * further call (room 0). */
    c = m->last;
    table_remove(m, c->base);
    c->fresh = 0;
  } else {
    /* Clock: skip recently used chunks once, evict the first cold one. */
    for (;;) {
      c = &m->chunks[m->clock_hand];
      m->clock_hand = (m->clock_hand + 1) % m->max_chunks;
      if (c != m->last && !c->referenced) break;
      c->referenced = 0;
    }
    table_remove(m, c->base);
    c->fresh = 0;
  }
  c->base = base;
  c->streamed = next;
  c->referenced = 1;
  c->any_bad = 0;
  memset(c->bad, 0, sizeof(c->bad));
  memset(c->counted, 0, sizeof(c->counted));
  memset(c->synced, 0, sizeof(c->synced));
  memset(c->zeroed, 0, sizeof(c->zeroed));
  c->absent_known = 0;
  m->bytes_loaded += UR_CHUNK_SIZE;
  m->chunk_loads++;
  size_t i = hash_slot(m, base);
  while (m->table[i]) i = (i + 1) & m->table_mask;
  m->table[i] = (uint32_t)(c - m->chunks) + 1;
  return c;
}

/* Sets the bits of the chunk's pages in [lo, hi) (clipped to the chunk). */
static void mark_pages(uint64_t *bits, uint64_t base, uint64_t lo, uint64_t hi) {
  uint64_t end = base + UR_CHUNK_SIZE;
  if (lo < base) lo = base;
  if (hi > end || hi < lo) hi = end;
  for (uint64_t addr = lo & ~(UR_PAGE_SIZE - 1); addr < hi; addr += UR_PAGE_SIZE) {
    size_t page = (size_t)((addr - base) >> UR_PAGE_SHIFT);
    bits[page / 64] |= UINT64_C(1) << (page % 64);
  }
}

/* With the process's layout known (ur_mem_set_layout): the chunk's pages
 * outside every mapping (gone: reading them could even grow a stack) and its
 * demand-zero pages the process does not have (zero), told by the chunk's
 * pagemap entries when given (pm), else asked. 0 if neither. */
static int chunk_layout(const struct ur_pread_mem *m, uint64_t base, uint64_t *gone,
                        uint64_t *zero, const uint64_t *pm) {
  uint64_t end = base + UR_CHUNK_SIZE;
  if (!m->layout || m->pagemap_fd < 0 || end < base) return 0;
  uint64_t mapped[UR_CHUNK_PAGES / 64] = {0};
  for (size_t i = ur_range_after(m->readable, m->n_readable, base);
       i < m->n_readable && m->readable[2 * i] < end; i++)
    mark_pages(mapped, base, m->readable[2 * i], m->readable[2 * i + 1]);
  int any = 0;
  for (size_t w = 0; w < UR_CHUNK_PAGES / 64; w++) any |= (gone[w] = ~mapped[w]) != 0;
  size_t i = ur_range_after(m->zero_ranges, m->n_zero_ranges, base);
  if (i == m->n_zero_ranges || m->zero_ranges[2 * i] >= end) return any;
  uint64_t present[UR_CHUNK_PAGES / 64] = {0};
  if (pm) {
    for (size_t p = 0; p < UR_CHUNK_PAGES; p++)
      if (pm[p] & (PM_PRESENT | PM_SWAPPED)) present[p / 64] |= UINT64_C(1) << (p % 64);
    for (; i < m->n_zero_ranges && m->zero_ranges[2 * i] < end; i++)
      mark_pages(zero, base, m->zero_ranges[2 * i], m->zero_ranges[2 * i + 1]);
    for (size_t w = 0; w < UR_CHUNK_PAGES / 64; w++) any |= (zero[w] &= ~present[w]) != 0;
    return any;
  }
  struct page_region vec[UR_CHUNK_PAGES / 2 + 1];
  struct pm_scan_arg a = {
      .size = sizeof(a),
      .start = base,
      .end = end,
      .vec = (uint64_t)(uintptr_t)vec,
      .vec_len = sizeof vec / sizeof vec[0],
      .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
      .return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
  };
  long n = ioctl(m->pagemap_fd, PAGEMAP_SCAN, &a);
  if (n < 0 || a.walk_end < end) return any; /* cannot tell: read them */
  for (long k = 0; k < n; k++) mark_pages(present, base, vec[k].start, vec[k].end);
  for (; i < m->n_zero_ranges && m->zero_ranges[2 * i] < end; i++)
    mark_pages(zero, base, m->zero_ranges[2 * i], m->zero_ranges[2 * i + 1]);
  for (size_t w = 0; w < UR_CHUNK_PAGES / 64; w++) any |= (zero[w] &= ~present[w]) != 0;
  return any;
}

/* Touches only c: chunks can be read by several threads at once. */
static void read_chunk(const struct ur_pread_mem *m, struct ur_chunk *c) {
  uint64_t gone[UR_CHUNK_PAGES / 64] = {0}, zero[UR_CHUNK_PAGES / 64] = {0};
  uint64_t entries[UR_CHUNK_PAGES];
  int token =
      read_entries(m->pagemap_fd, m->pid, &m->vm_read_refused, c->base, UR_CHUNK_PAGES, entries);
  const uint64_t *pm = token ? entries : NULL;
  c->absent_known = 0;
  if (!chunk_layout(m, c->base, gone, zero, pm)) {
    read_span(source_of(m), c->base, c->data, UR_CHUNK_SIZE, c->bad, 0, &c->any_bad, pm);
    ur_pin_leave(token);
    ur_cow_overlay(m->cow, c->base, c->data, UR_CHUNK_SIZE, c->bad, 0);
    c->fresh = 0;
    return;
  }
  /* The arena is huge-page advised (the mark walks it at random), but a
   * huge page backs all of its 2 MiB as soon as one page is written: a
   * sparse heap's chunks (big blocks mostly never touched) took three times
   * the pages the process has. A fresh slot for a chunk with many pages
   * absent gets small pages instead. */
  if (c->fresh) {
    size_t absent = 0;
    for (size_t w = 0; w < UR_CHUNK_PAGES / 64; w++)
      absent += (size_t)__builtin_popcountll(gone[w] | zero[w]);
    if (absent >= UR_CHUNK_PAGES / 4) madvise(c->data, UR_CHUNK_SIZE, MADV_NOHUGEPAGE);
  }
  /* Runs of pages alike: read, zero, or unreadable without a read. */
  for (size_t p = 0; p < UR_CHUNK_PAGES;) {
    int kind = (int)((gone[p / 64] >> (p % 64)) & 1) * 2 + (int)((zero[p / 64] >> (p % 64)) & 1);
    size_t q = p + 1;
    while (q < UR_CHUNK_PAGES &&
           (int)((gone[q / 64] >> (q % 64)) & 1) * 2 + (int)((zero[q / 64] >> (q % 64)) & 1) == kind)
      q++;
    uint8_t *at = c->data + p * UR_PAGE_SIZE;
    if (kind == 0) {
      read_span(source_of(m), c->base + p * UR_PAGE_SIZE, at, (q - p) * UR_PAGE_SIZE, c->bad, p,
                &c->any_bad, pm ? pm + p : NULL);
    } else {
      /* A fresh slot is zero already: writing zeros would only make the
       * kernel back it (a sparse reservation among the roots, such as a
       * big array mostly untouched, took its whole size in memory). */
      if (!c->fresh) memset(at, 0, (q - p) * UR_PAGE_SIZE);
      if (kind >= 2) {
        for (size_t r = p; r < q; r++) c->bad[r / 64] |= UINT64_C(1) << (r % 64);
        c->any_bad = 1;
      }
    }
    p = q;
  }
  ur_pin_leave(token);
  /* Absent and zero, not unreadable (those are counted as they are met). */
  for (size_t w = 0; w < UR_CHUNK_PAGES / 64; w++) c->absent[w] = zero[w] & ~gone[w];
  c->absent_known = 1;
  c->fresh = 0;
  ur_cow_overlay(m->cow, c->base, c->data, UR_CHUNK_SIZE, c->bad, 0);
}

void ur_mem_read_into(const struct ur_pread_mem *m, struct ur_chunk *c, uint64_t addr,
                      uint64_t len) {
  size_t first = (size_t)((addr - c->base) >> UR_PAGE_SHIFT);
  size_t pages = (size_t)(len >> UR_PAGE_SHIFT);
  for (size_t p = first; p < first + pages; p++) c->bad[p / 64] &= ~(UINT64_C(1) << (p % 64));
  c->absent_known = 0;
  int any = 0;
  uint64_t entries[UR_CHUNK_PAGES];
  int token = read_entries(m->pagemap_fd, m->pid, &m->vm_read_refused, addr, pages, entries);
  read_span(source_of(m), addr, c->data + (addr - c->base), (size_t)len, c->bad, first, &any,
            token ? entries : NULL);
  ur_pin_leave(token);
  ur_cow_overlay(m->cow, addr, c->data + (addr - c->base), (size_t)len, c->bad, first);
  c->fresh = 0;
  if (any) c->any_bad = 1;
}

/* read_span for n (addr, len) page runs of the chunk at cbase (its buffer
 * data), ascending and disjoint, given the pagemap entries of the pages
 * from pm_lo on: the pages the process maps alone, of every run, in one
 * process_vm_readv; every other page, and whatever the call did not read,
 * through /proc/PID/mem. */
static void read_runs(struct live_source src, uint64_t cbase, uint8_t *data, const uint64_t *runs,
                      size_t n, uint64_t *bad, int *any_bad, const uint64_t *pm, uint64_t pm_lo) {
  struct iovec local[UR_CHUNK_PAGES], remote[UR_CHUNK_PAGES];
  size_t nv = 0;
  for (size_t k = 0; k < n; k++) {
    uint64_t addr = runs[2 * k];
    size_t pages = (size_t)(runs[2 * k + 1] >> UR_PAGE_SHIFT);
    const uint64_t *e = pm + ((addr - pm_lo) >> UR_PAGE_SHIFT);
    for (size_t p = 0; p < pages;) {
      int pin = pinnable(e[p]);
      size_t q = p + 1;
      while (q < pages && pinnable(e[q]) == pin) q++;
      uint64_t at = addr + ((uint64_t)p << UR_PAGE_SHIFT);
      size_t bytes = (q - p) << UR_PAGE_SHIFT;
      if (pin && nv < UR_CHUNK_PAGES) {
        local[nv] = (struct iovec){data + (at - cbase), bytes};
        remote[nv] = (struct iovec){(void *)(uintptr_t)at, bytes};
        nv++;
      } else {
        read_pages(src.fd, at, data + (at - cbase), bytes, bad,
                   (size_t)((at - cbase) >> UR_PAGE_SHIFT), any_bad);
      }
      p = q;
    }
  }
  if (nv) pin_runs(src, local, remote, nv, cbase, bad, any_bad);
}

void ur_mem_read_runs_into(const struct ur_pread_mem *m, struct ur_chunk *c, const uint64_t *runs,
                           size_t n) {
  if (n == 0) return;
  uint64_t lo = runs[0], hi = runs[2 * n - 2] + runs[2 * n - 1];
  uint64_t entries[UR_CHUNK_PAGES];
  int token = read_entries(m->pagemap_fd, m->pid, &m->vm_read_refused, lo,
                           (size_t)((hi - lo) >> UR_PAGE_SHIFT), entries);
  int any = 0;
  c->absent_known = 0;
  for (size_t k = 0; k < n; k++) {
    size_t first = (size_t)((runs[2 * k] - c->base) >> UR_PAGE_SHIFT);
    for (size_t p = first; p < first + (runs[2 * k + 1] >> UR_PAGE_SHIFT); p++)
      c->bad[p / 64] &= ~(UINT64_C(1) << (p % 64));
  }
  if (token) {
    read_runs(source_of(m), c->base, c->data, runs, n, c->bad, &any, entries, lo);
    ur_pin_leave(token);
  } else {
    for (size_t k = 0; k < n; k++) {
      uint64_t addr = runs[2 * k];
      read_span(source_of(m), addr, c->data + (addr - c->base), (size_t)runs[2 * k + 1], c->bad,
                (size_t)((addr - c->base) >> UR_PAGE_SHIFT), &any, NULL);
    }
  }
  for (size_t k = 0; k < n; k++) {
    uint64_t addr = runs[2 * k];
    ur_cow_overlay(m->cow, addr, c->data + (addr - c->base), (size_t)runs[2 * k + 1], c->bad,
                   (size_t)((addr - c->base) >> UR_PAGE_SHIFT));
  }
  c->fresh = 0;
  if (any) c->any_bad = 1;
}

static struct ur_chunk *load_chunk(struct ur_pread_mem *m, uint64_t base) {
  struct ur_chunk *c = reserve_chunk(m, base);
  read_chunk(m, c);
  return c;
}

/* Atomic: the marking threads' readers share the chunks' counted bits. */
static void count_bad(struct ur_mem *reader, struct ur_chunk *c, uint64_t off, uint64_t len) {
  size_t first = (size_t)(off >> UR_PAGE_SHIFT);
  size_t last = (size_t)((off + len - 1) >> UR_PAGE_SHIFT);
  for (size_t p = first; p <= last; p++) {
    uint64_t bit = UINT64_C(1) << (p % 64);
    if (!(c->bad[p / 64] & bit)) continue;
    if (!(__atomic_fetch_or(&c->counted[p / 64], bit, __ATOMIC_RELAXED) & bit))
      reader->pages_skipped++;
  }
}

static struct ur_chunk *find_chunk(struct ur_pread_mem *m, uint64_t base) {
  for (size_t i = hash_slot(m, base); m->table[i]; i = (i + 1) & m->table_mask) {
    struct ur_chunk *t = &m->chunks[m->table[i] - 1];
    if (t->base == base) return t;
  }
  return NULL;
}

struct ur_chunk *ur_mem_find(struct ur_pread_mem *m, uint64_t base) { return find_chunk(m, base); }

int ur_mem_holds_page(struct ur_pread_mem *m, uint64_t addr) {
  struct ur_chunk *c = find_chunk(m, addr & ~(UR_CHUNK_SIZE - 1));
  size_t page = (size_t)((addr & (UR_CHUNK_SIZE - 1)) >> UR_PAGE_SHIFT);
  return c && !(c->bad[page / 64] & (UINT64_C(1) << (page % 64)));
}

const uint8_t *ur_mem_held_bytes(struct ur_pread_mem *m, uint64_t addr, size_t len) {
  uint64_t base = addr & ~(UR_CHUNK_SIZE - 1);
  if (!len || addr + len < addr || ((addr + len - 1) & ~(UR_CHUNK_SIZE - 1)) != base) return NULL;
  struct ur_chunk *c = find_chunk(m, base);
  if (!c) return NULL;
  for (uint64_t p = (addr - base) >> UR_PAGE_SHIFT; p <= (addr + len - 1 - base) >> UR_PAGE_SHIFT; p++)
    if (c->bad[p / 64] & (UINT64_C(1) << (p % 64))) return NULL;
  return c->data + (addr - base);
}

/* Whether a view at addr loads nothing: its chunk is held, or the cache is
 * frozen (it loads nothing any more). */
static int chunk_held(struct ur_mem *mm, uint64_t addr) {
  struct ur_pread_mem *m = (struct ur_pread_mem *)mm;
  return m->frozen || find_chunk(m, addr & ~(UR_CHUNK_SIZE - 1)) != NULL;
}

static int copy_pairs(uint64_t **to, size_t *n_to, const uint64_t *pairs, size_t n) {
  uint64_t *copy = n ? malloc(n * 2 * sizeof(uint64_t)) : NULL;
  if (n && !copy) return -ENOMEM;
  if (n) memcpy(copy, pairs, n * 2 * sizeof(uint64_t));
  free(*to);
  *to = copy;
  *n_to = n;
  return 0;
}

int ur_mem_set_zero_ranges(struct ur_pread_mem *m, const uint64_t *pairs, size_t n) {
  return copy_pairs(&m->zero_ranges, &m->n_zero_ranges, pairs, n);
}


int ur_mem_set_layout(struct ur_pread_mem *m, const uint64_t *readable, size_t nr,
                      const uint64_t *demand_zero, size_t nz) {
  int rc = copy_pairs(&m->readable, &m->n_readable, readable, nr);
  if (rc == 0) rc = ur_mem_set_zero_ranges(m, demand_zero, nz);
  if (rc < 0) return rc;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)m->pid);
  if (m->pagemap_fd < 0 && (m->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return -errno;
  m->layout = 1;
  return 0;
}

uint64_t ur_mem_zero_range_end(const struct ur_pread_mem *m, uint64_t addr) {
  size_t i = ur_range_after(m->zero_ranges, m->n_zero_ranges, addr);
  return i < m->n_zero_ranges && m->zero_ranges[2 * i] <= addr ? m->zero_ranges[2 * i + 1] : 0;
}

static const uint8_t zero_chunk[UR_CHUNK_SIZE];

struct ur_chunk *ur_mem_chunk(struct ur_pread_mem *m, uint64_t base, int *err) {
  struct ur_chunk *c = find_chunk(m, base);
  if (c) return c;
  if (m->used_chunks == m->max_chunks) {
    *err = -ENOSPC;
    return NULL;
  }
  return reserve_chunk(m, base);
}

size_t ur_mem_read_cached(struct ur_pread_mem *m, uint64_t addr, void *buf, size_t len) {
  size_t pos = 0, good = 0;
  uint8_t *out = buf;
  while (pos < len) {
    uint64_t a = addr + pos, base = a & ~(UR_CHUNK_SIZE - 1);
    size_t n = (size_t)(UR_CHUNK_SIZE - (a - base));
    if (n > len - pos) n = len - pos;
    struct ur_chunk *c = find_chunk(m, base);
    if (!c) {
      memset(out + pos, 0, n);
      uint64_t zend = ur_mem_zero_range_end(m, a);
      if (zend) good += zend - a < n ? (size_t)(zend - a) : n;
    } else {
      memcpy(out + pos, c->data + (a - base), n);
      for (size_t q = 0; q < n;) {
        size_t page = (size_t)((a + q - base) >> UR_PAGE_SHIFT);
        size_t in_page = (size_t)(UR_PAGE_SIZE - ((a + q) & (UR_PAGE_SIZE - 1)));
        if (in_page > n - q) in_page = n - q;
        if (!(c->bad[page / 64] & (UINT64_C(1) << (page % 64))))
          good += in_page;
        else
          memset(out + pos + q, 0, in_page);
        q += in_page;
      }
    }
    pos += n;
  }
  return good;
}

int ur_mem_reserve(struct ur_pread_mem *m, const uint64_t *ranges, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t b = ranges[2 * i], e = ranges[2 * i + 1];
    if (e <= b) continue;
    for (uint64_t base = b & ~(UR_CHUNK_SIZE - 1); base < e; base += UR_CHUNK_SIZE) {
      if (find_chunk(m, base)) continue;
      if (m->used_chunks == m->max_chunks) return -ENOSPC; /* would evict */
      reserve_chunk(m, base);
      if (base + UR_CHUNK_SIZE < base) break; /* the top of the address space */
    }
  }
  return 0;
}

void ur_mem_parallel(unsigned threads, void *(*part)(void *), void *jobs, size_t job_size) {
  if (threads < 1) threads = 1;
  if (threads > UR_MEM_MAX_THREADS) threads = UR_MEM_MAX_THREADS;
  pthread_t t[UR_MEM_MAX_THREADS];
  unsigned started = 0;
  for (unsigned k = 0; k + 1 < threads; k++)
    if (pthread_create(&t[k], NULL, part, (char *)jobs + k * job_size) == 0) started |= 1u << k;
  /* The last part runs here; a thread that cannot start leaves its part to
   * this one too. */
  for (unsigned k = 0; k < threads; k++)
    if (!(started & (1u << k))) part((char *)jobs + k * job_size);
  for (unsigned k = 0; k + 1 < threads; k++)
    if (started & (1u << k)) pthread_join(t[k], NULL);
}

struct fill_job {
  const struct ur_pread_mem *m;
  size_t first, end, step;
};

static void *fill_part(void *arg) {
  const struct fill_job *j = arg;
  for (size_t i = j->first; i < j->end; i += j->step) read_chunk(j->m, &j->m->chunks[i]);
  return NULL;
}

void ur_mem_fill(struct ur_pread_mem *m, size_t from, unsigned threads) {
  if (threads < 1) threads = 1;
  if (threads > UR_MEM_MAX_THREADS) threads = UR_MEM_MAX_THREADS;
  struct fill_job jobs[UR_MEM_MAX_THREADS];
  for (unsigned k = 0; k < threads; k++)
    jobs[k] = (struct fill_job){m, from + k, m->used_chunks, threads};
  ur_mem_parallel(threads, fill_part, jobs, sizeof jobs[0]);
}

static int pread_present(struct ur_mem *mm, uint64_t addr, uint64_t end, uint64_t *out, int cap,
                         uint64_t *done);

void ur_mem_freeze(struct ur_pread_mem *m) {
  m->frozen = 1;
  m->mem.room = SIZE_MAX; /* nothing is evicted any more: every view stays valid */
  m->mem.present = pread_present;
}

/* Frozen and not held, inside a zero range: absent when copied, so zero. No
 * window, so each view of it comes back to the backend. */
static const uint8_t *zero_view(struct ur_mem *mm, uint64_t zend, uint64_t addr, uint64_t end,
                                uint64_t *avail) {
  uint64_t base = addr & ~(UR_CHUNK_SIZE - 1), next = base + UR_CHUNK_SIZE;
  uint64_t n = (zend < next && zend > base ? zend : next) - addr;
  if (end > addr && end - addr < n) n = end - addr;
  mm->win_lo = mm->win_hi = 0;
  *avail = n;
  return zero_chunk + (addr - base);
}

/* A view of a held chunk; the window moves onto it unless it has bad pages,
 * which every view must count (once each, whichever reader comes first). */
static const uint8_t *held_view(struct ur_mem *mm, struct ur_chunk *c, uint64_t addr,
                                uint64_t end, uint64_t *avail) {
  uint64_t base = c->base, off = addr - base;
  uint64_t n = UR_CHUNK_SIZE - off;
  if (end > addr && end - addr < n) n = end - addr;
  if (c->any_bad || base + UR_CHUNK_SIZE == 0) {
    if (c->any_bad) count_bad(mm, c, off, n);
    mm->win_lo = mm->win_hi = 0;
  } else {
    mm->win_lo = base;
    mm->win_hi = base + UR_CHUNK_SIZE;
    mm->win_delta = (uint64_t)(uintptr_t)c->data - base;
  }
  *avail = n;
  return c->data + off;
}

static const uint8_t *chunk_view(struct ur_mem *mm, uint64_t addr, uint64_t end, uint64_t *avail) {
  struct ur_pread_mem *m = (struct ur_pread_mem *)mm;
  uint64_t base = addr & ~(UR_CHUNK_SIZE - 1);
  struct ur_chunk *c = m->last;
  if (!c || c->base != base) {
    c = find_chunk(m, base);
    if (!c) {
      uint64_t zend = m->frozen ? ur_mem_zero_range_end(m, addr) : 0;
      if (zend) return zero_view(mm, zend, addr, end, avail);
      if (m->frozen) {
        m->frozen_miss = 1;
        return NULL;
      }
      if (m->read_budget && m->bytes_loaded >= m->read_budget) {
        m->over_budget = 1;
        return NULL;
      }
      c = load_chunk(m, base);
    }
    if (!c) return NULL;
    c->referenced = 1;
    m->last = c;
  }
  return held_view(mm, c, addr, end, avail);
}

/* Appends [a, next) of the chunk at base to out, less its pages set in
 * absent, run by run (merged with the run before). Returns where it
 * stopped: next, or earlier when out (cap pairs, *k used) is full. */
static uint64_t add_present_runs(const uint64_t *absent, uint64_t base, uint64_t a, uint64_t next,
                                 uint64_t *out, int cap, int *k) {
  for (uint64_t at = a; at < next;) {
    size_t page = (size_t)((at - base) >> UR_PAGE_SHIFT);
    int gap = absent ? (int)((absent[page / 64] >> (page % 64)) & 1) : 0;
    uint64_t run = absent ? (at & ~(UR_PAGE_SIZE - 1)) + UR_PAGE_SIZE : next;
    while (run < next) {
      size_t q = (size_t)((run - base) >> UR_PAGE_SHIFT);
      if ((int)((absent[q / 64] >> (q % 64)) & 1) != gap) break;
      run += UR_PAGE_SIZE;
    }
    if (run > next) run = next;
    if (!gap) {
      if (*k && out[2 * *k - 1] == at) {
        out[2 * *k - 1] = run;
      } else {
        if (*k == cap) return at;
        out[2 * *k] = at;
        out[2 * *k + 1] = run;
        (*k)++;
      }
    }
    at = run;
  }
  return next;
}

/* The pages of the chunk at base the process lacks now, as absent bits
 * (asked of the kernel, no bytes read), or NULL when that cannot be told. */
static const uint64_t *asked_absent(const struct ur_pread_mem *m, uint64_t base,
                                    uint64_t absent[UR_CHUNK_PAGES / 64]) {
  uint64_t gone[UR_CHUNK_PAGES / 64];
  memset(absent, 0, UR_CHUNK_PAGES / 8);
  if (!chunk_layout(m, base, gone, absent, NULL)) return NULL;
  for (size_t w = 0; w < UR_CHUNK_PAGES / 64; w++) absent[w] &= ~gone[w];
  return absent;
}

/* mem.present over the cache, chunk by chunk: the pages of a held chunk the
 * process did not have when it was read are left out. Of the rest, frozen
 * (ask 0): a chunk it does not hold inside a demand-zero range was absent
 * when copied and reads as zero (zero_view), any other is present; ask 1
 * (ur_mem_skip_absent, where a page the process lacks now is zero in what
 * is swept): the kernel says which pages the chunk lacks now. A span of
 * absent pages is not read at all. */
static int cache_present(struct ur_pread_mem *m, int ask, uint64_t addr, uint64_t end,
                         uint64_t *out, int cap, uint64_t *done) {
  int k = 0;
  uint64_t a = addr;
  while (a < end) {
    uint64_t base = a & ~(UR_CHUNK_SIZE - 1), next = base + UR_CHUNK_SIZE;
    if (next <= base || next > end) next = end;
    struct ur_chunk *c = find_chunk(m, base);
    uint64_t asked[UR_CHUNK_PAGES / 64];
    const uint64_t *absent = c && c->absent_known ? c->absent : NULL;
    uint64_t zend = c || ask ? 0 : ur_mem_zero_range_end(m, a);
    if (zend) {
      if (zend < next) next = zend;
    } else {
      if (!absent && ask) absent = asked_absent(m, base, asked);
      uint64_t got = add_present_runs(absent, base, a, next, out, cap, &k);
      if (got < next) {
        next = got;
        if (next == a) break; /* out is full */
      }
    }
    a = next;
  }
  if (a <= addr) return -1;
  *done = a;
  return k;
}

static int pread_present(struct ur_mem *mm, uint64_t addr, uint64_t end, uint64_t *out, int cap,
                         uint64_t *done) {
  return cache_present((struct ur_pread_mem *)mm, 0, addr, end, out, cap, done);
}

static int now_present(struct ur_mem *mm, uint64_t addr, uint64_t end, uint64_t *out, int cap,
                       uint64_t *done) {
  return cache_present((struct ur_pread_mem *)mm, 1, addr, end, out, cap, done);
}

void ur_mem_skip_absent(struct ur_pread_mem *m) {
  if (!m->frozen) m->mem.present = now_present;
}

static int view_present(struct ur_mem *mm, uint64_t addr, uint64_t end, uint64_t *out, int cap,
                        uint64_t *done) {
  return cache_present(((struct ur_frozen_view *)mm)->src, 0, addr, end, out, cap, done);
}

/* A frozen cache changes no more: views only look chunks up. */
static const uint8_t *frozen_view(struct ur_mem *mm, uint64_t addr, uint64_t end,
                                  uint64_t *avail) {
  struct ur_pread_mem *m = ((struct ur_frozen_view *)mm)->src;
  struct ur_chunk *c = find_chunk(m, addr & ~(UR_CHUNK_SIZE - 1));
  if (c) return held_view(mm, c, addr, end, avail);
  uint64_t zend = ur_mem_zero_range_end(m, addr);
  if (zend) return zero_view(mm, zend, addr, end, avail);
  __atomic_store_n(&m->frozen_miss, 1, __ATOMIC_RELAXED);
  return NULL;
}

void ur_frozen_view_init(struct ur_frozen_view *v, struct ur_pread_mem *src) {
  memset(v, 0, sizeof(*v));
  v->mem.slow = frozen_view;
  v->mem.room = SIZE_MAX;
  v->mem.present = view_present;
  v->src = src;
}

int ur_mem_load_file(struct ur_pread_mem *m, int fd, uint64_t offset, uint64_t addr, uint64_t len) {
  if ((addr | len) & (UR_PAGE_SIZE - 1)) return -EINVAL;
  while (len) {
    uint64_t base = addr & ~(UR_CHUNK_SIZE - 1), off = addr - base;
    uint64_t n = UR_CHUNK_SIZE - off < len ? UR_CHUNK_SIZE - off : len;
    int err = 0;
    struct ur_chunk *c = ur_mem_chunk(m, base, &err);
    if (!c) return err;
    c->fresh = 0;
    c->absent_known = 0;
    uint64_t got = 0;
    while (got < n) {
      ssize_t r = pread(fd, c->data + off + got, (size_t)(n - got), (off_t)(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return -errno;
      if (r == 0) return -ENODATA; /* the file ends before the range does */
      got += (uint64_t)r;
    }
    mark_pages(c->synced, base, addr, addr + n);
    for (size_t w = 0; w < UR_CHUNK_PAGES / 64; w++) c->bad[w] &= ~c->synced[w];
    addr += n;
    offset += n;
    len -= n;
  }
  return 0;
}
