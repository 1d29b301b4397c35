/*
 * Reader over another process's memory (/proc/PID/mem) for the mark and fold
 * phases.
 *
 * The walker touches memory word by word in DFS order; one pread per word
 * would cost ~1 us each, so memory is loaded in 1 MiB chunks on first touch
 * and kept in a bounded cache (clock eviction). Pages the kernel refuses
 * (EIO/EFAULT: unmapped, VM_IO, ...) read as zero and are counted once each
 * when a scan actually touches them; a scan never fails because of them.
 */
#ifndef UR_SCANNER_MEMORY_H
#define UR_SCANNER_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "mem.h"

/* The index of the first of n sorted (begin, end) pairs ending after addr
 * (n: none). */
static inline size_t ur_range_after(const uint64_t *pairs, size_t n, uint64_t addr) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (pairs[2 * mid + 1] <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* qsort's order for records that begin with a uint64_t key: (begin, end)
 * pairs, (address, x) pairs, struct ur_size_map_ref by base. */
static inline int ur_by_first_u64(const void *a, const void *b) {
  uint64_t x, y;
  memcpy(&x, a, sizeof x);
  memcpy(&y, b, sizeof y);
  return (x > y) - (x < y);
}

#define UR_CHUNK_SHIFT 20
#define UR_CHUNK_SIZE ((uint64_t)1 << UR_CHUNK_SHIFT)
#define UR_CHUNK_PAGES (UR_CHUNK_SIZE / UR_PAGE_SIZE)

struct ur_chunk {
  uint64_t base;                          /* chunk-aligned address; UINT64_MAX if slot unused */
  uint8_t *data;                          /* UR_CHUNK_SIZE bytes */
  uint64_t bad[UR_CHUNK_PAGES / 64];      /* pages that could not be read */
  uint64_t counted[UR_CHUNK_PAGES / 64];  /* bad pages already counted in pages_skipped */
  uint64_t synced[UR_CHUNK_PAGES / 64];   /* pages a copy snapshot holds (page_sync.h) */
  uint64_t zeroed[UR_CHUNK_PAGES / 64];   /* of those, absent when synced: held as zero */
  /* Pages the process did not have when the chunk was read (read_chunk):
   * held as zero, and not read by a mark over the frozen cache. Known only
   * while absent_known: any other write to the chunk clears it. */
  uint64_t absent[UR_CHUNK_PAGES / 64];
  int absent_known;
  int any_bad;
  int referenced;                         /* clock bit */
  int fresh;                              /* data never written since mapped: all zero */
  /* Loaded right after the chunk viewed before it: a read moving forward
   * through memory, which does not come back to the chunk before. */
  int streamed;
};

struct ur_pread_mem {
  struct ur_mem mem;        /* first: the walker holds &mem; window = the last clean chunk */
  int fd;
  /* The process's pagemap, or -1: which pages exist, and which
   * process_vm_readv may read (read_span in memory.c); vm_read_refused: it
   * was refused. */
  int pagemap_fd;
  int layout;               /* ur_mem_set_layout: the absent and gone pages are known */
  int vm_read_refused;
  pid_t pid;
  struct ur_chunk *chunks;  /* pool of max_chunks */
  uint8_t *arena;           /* their buffers: max_chunks * UR_CHUNK_SIZE reserved */
  size_t max_chunks;
  size_t used_chunks;
  size_t clock_hand;
  uint32_t *table;          /* open addressing: chunk pool index + 1, 0 = empty */
  size_t table_mask;
  struct ur_chunk *last;    /* one-entry lookup cache: sequential scans hit it */
  uint64_t bytes_loaded;
  uint64_t bytes_vm_read;   /* of what was read, by process_vm_readv (atomic) */
  uint64_t chunk_loads;
  /* 0, or the most bytes this reader loads: a view that would load past it
   * fails (NULL, over_budget set). A mark whose access pattern keeps
   * evicting what it comes back to then ends instead of reading on, which
   * a target stopped for the sweep would wait out (sweep.c). */
  uint64_t read_budget;
  int over_budget;
  int frozen;               /* ur_mem_freeze ran: load nothing more */
  int frozen_miss;          /* a view was asked outside what was preloaded */
  /* Frozen: a chunk not held inside one of these sorted (begin, end) pairs
   * reads as zero (a copy snapshot's anonymous memory that was absent). */
  uint64_t *zero_ranges;
  size_t n_zero_ranges;
  uint64_t *readable;       /* ur_mem_set_layout: the process's mappings */
  struct ur_cow *cow;       /* a copy-on-write snapshot's saved pages (cow.h), or NULL */
  size_t n_readable;
};

/* The most a cache may take: half the available memory (1 GiB if unknown),
 * and no more than the budget set below. */
uint64_t ur_mem_cache_bound(void);

/* What this process's caches may take at most besides (0: no budget): the
 * scanner's share of the room its own memory cgroup has left. */
void ur_mem_set_budget(uint64_t bytes);

/* Open /proc/pid/mem for reading; cache_bytes bounds the chunk cache (0:
 * default 1 GiB). Returns 0 or -errno. */
int ur_mem_open(struct ur_pread_mem *m, pid_t pid, uint64_t cache_bytes);
void ur_mem_close(struct ur_pread_mem *m);

/* Give every chunk under the (begin, end) pairs a slot, unread: read them
 * with ur_mem_fill before any view. Returns 0, or -ENOSPC when they do not
 * all fit in the cache with what is there already (the slots given stay). */
int ur_mem_reserve(struct ur_pread_mem *m, const uint64_t *ranges, size_t n);

#define UR_MEM_MAX_THREADS 16

/* Run part(&jobs[k]) for each of `threads` jobs (at most UR_MEM_MAX_THREADS),
 * on threads of their own but the last, which runs on the caller's. */
void ur_mem_parallel(unsigned threads, void *(*part)(void *), void *jobs, size_t job_size);

/* Read the slots given since used_chunks was `from`, with `threads` threads
 * (pread on one descriptor: each thread reads whole chunks of its own). */
void ur_mem_fill(struct ur_pread_mem *m, size_t from, unsigned threads);

/* Load nothing more: the caller lets the process run on, and a later load
 * would read another moment. A view outside what is loaded then fails (NULL,
 * frozen_miss set). */
void ur_mem_freeze(struct ur_pread_mem *m);
/* The pages the process lacks are left out of what the mark reads
 * (mem.present): for memory where a page it lacks now is zero in what is
 * swept, a target stopped for the whole sweep (nothing of it changes) or a
 * copy-on-write snapshot (a page absent now was absent when it was sealed:
 * memory released since makes the scan run again, cow.h). */
void ur_mem_skip_absent(struct ur_pread_mem *m);

/* A reader of its own over a frozen cache (ur_mem_freeze), for one more
 * marking thread: chunks are only looked up, never loaded; bad pages are
 * counted once across all readers, in the reader that met them first. */
struct ur_frozen_view {
  struct ur_mem mem; /* first */
  struct ur_pread_mem *src;
};
void ur_frozen_view_init(struct ur_frozen_view *v, struct ur_pread_mem *src);

/* Views (mem.h ur_mem_view on &m->mem) reach to the end of addr's chunk and
 * stay valid while m->mem.room more chunks can be loaded without eviction. */

/* Copy len bytes of the file fd from offset into the cache at addr (both
 * page multiples), the pages then held as a copy snapshot's synced pages
 * (page_sync.h ur_sync_finish): a core file's memory, or a mapped file's
 * pages a core left out. 0, -ENOSPC (the cache is full), -ENODATA (the file
 * ends first), -EINVAL or -errno of the read. */
int ur_mem_load_file(struct ur_pread_mem *m, int fd, uint64_t offset, uint64_t addr, uint64_t len);

/* Uncached read of [addr, addr+len) with unreadable pages zeroed (not
 * counted). Returns the number of bytes that were actually readable. */
size_t ur_mem_read_direct(int fd, uint64_t addr, void *buf, size_t len);

/* The same through /proc/PID/mem (fd) and, for the pages pagemap_fd shows
 * the process maps alone, process_vm_readv (memory.c read_span); *refused
 * is set once that is refused, and then only fd is read. */
size_t ur_mem_read_live(int fd, int pagemap_fd, pid_t pid, int *refused, uint64_t addr, void *buf,
                        size_t len);

/* The same, but from what the cache holds (a frozen copy snapshot): bytes of
 * chunks it does not hold and of pages that could not be read are zeroed. */
size_t ur_mem_read_cached(struct ur_pread_mem *m, uint64_t addr, void *buf, size_t len);

/* Pages [addr, addr + len) of one chunk (never crossing its end), read into
 * its buffer with their bad bits redone; the chunk must hold a slot
 * (ur_mem_chunk). Touches only that chunk. */
void ur_mem_read_into(const struct ur_pread_mem *m, struct ur_chunk *c, uint64_t addr,
                      uint64_t len);
/* ur_mem_read_into for n (addr, len) page runs of one chunk, ascending and
 * disjoint: the pagemap of the pages from the first to the last read once,
 * and the pages the process maps alone, of every run, in one
 * process_vm_readv while the pin gate allows it (the concurrent mark's
 * second stop: its second registry copy holds a few
 * scattered pages of each chunk of the size maps: a read of the pagemap and
 * a call a page). */
void ur_mem_read_runs_into(const struct ur_pread_mem *m, struct ur_chunk *c, const uint64_t *runs,
                           size_t n);

/* The slot holding the chunk at base, or NULL. */
struct ur_chunk *ur_mem_find(struct ur_pread_mem *m, uint64_t base);

/* Whether a finished copy holds the page at addr: one it does not hold
 * reads as zero (ur_mem_read_cached). */
int ur_mem_holds_page(struct ur_pread_mem *m, uint64_t addr);

/* The copy's own bytes of [addr, addr + len) where one chunk holds every
 * page of it (read in place, not copied out), else NULL. */
const uint8_t *ur_mem_held_bytes(struct ur_pread_mem *m, uint64_t addr, size_t len);

/* Set the zero ranges (sorted (begin, end) pairs, copied). 0 or -ENOMEM. */
int ur_mem_set_zero_ranges(struct ur_pread_mem *m, const uint64_t *pairs, size_t n);

/* The process's layout, as sorted (begin, end) pairs: its readable
 * mappings, and those of them that are demand-zero (private, no file). A
 * chunk then loads neither the pages outside every mapping (unreadable;
 * reading them could grow a stack) nor the demand-zero pages the process
 * does not have (zero; reading them through /proc would map the zero page
 * into it). The demand-zero ones become the zero ranges too. 0, or -errno
 * (no pagemap: everything is read as before). */
int ur_mem_set_layout(struct ur_pread_mem *m, const uint64_t *readable, size_t nr,
                      const uint64_t *demand_zero, size_t nz);

/* The end of the zero range holding addr, or 0 if none does. */
uint64_t ur_mem_zero_range_end(const struct ur_pread_mem *m, uint64_t addr);

/* The slot of the chunk at base, given one if it has none (-ENOSPC in *err
 * when that would evict). */
struct ur_chunk *ur_mem_chunk(struct ur_pread_mem *m, uint64_t base, int *err);

#endif
