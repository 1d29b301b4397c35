/*
 * glibc's ptmalloc heap, walked from outside (docs/glibc-heap.md): the live
 * chunks of a process that runs without the shim, read from a snapshot of
 * its memory through a callback (never from a running process).
 *
 * The walk takes every chunk of every arena (the main arena's brk heap, each
 * other arena's heaps through heap_info.prev, from the current heap of its
 * top), the chunks mmap'ed on their own (found by their headers in the
 * anonymous memory that no heap covers), and subtracts what is free: the
 * chunks whose successor's PREV_INUSE is clear (checked against the bins),
 * fastbins and every given thread's tcache (safe-linked lists followed with
 * their bounds), and the tcache structures themselves. Every walk proves
 * itself before its answer is used: a check that fails makes it return
 * -EPROTO with one line in out->error, never a partial list.
 */
#ifndef UR_SCANNER_GLIBC_HEAP_H
#define UR_SCANNER_GLIBC_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* x86-64 offsets of one glibc release (malloc/malloc.c, malloc/arena.c). */
struct ur_glibc_layout {
  unsigned minor;            /* 2.minor */
  uint64_t arena_size;       /* sizeof(struct malloc_state) */
  uint64_t off_fastbins;     /* fastbinsY[nfastbins] */
  unsigned nfastbins;        /* 10; 0 from 2.43, which has none */
  uint64_t off_top;
  uint64_t off_bins;         /* bins[NBINS * 2 - 2] */
  uint64_t off_next;
  uint64_t off_system_mem;
  uint64_t heap_info_size;   /* sizeof(heap_info) */
  uint64_t mp_n_mmaps;       /* int */
  uint64_t mp_mmapped_mem;
  uint64_t mp_sbrk_base;
  uint64_t mp_hp_pagesize;   /* 0: no such field (before 2.35) */
  uint64_t tcache_entries;   /* offset of entries[] in tcache_perthread_struct */
  uint64_t tcache_chunk;     /* the chunk size of that struct */
  unsigned tcache_bins;
  unsigned tcache_small_bins; /* bins of one chunk size each; the rest hold ranges (2.42) */
  /* 2.42+: the counts are num_slots, the room left: a bin holds
   * mp_.tcache_count (at this offset in mp_) minus its count. */
  uint64_t mp_tcache_count;
  /* heaps are aligned to 4 huge pages with glibc.malloc.hugetlb >= 2 (2.35-2.41) */
  int heap_max_from_hp;
  int safe_linking;          /* 2.32+: tcache and fastbin next pointers mangled */
  /* 2.43+: a chunk mmap'ed alone is 16 bytes shorter than its mapping (and
   * its usable size 8 bytes shorter than its chunk, as any chunk's). */
  uint64_t mmap_trailer;
};

/* The layout of glibc 2.minor; -1 when that release is not supported. */
int ur_glibc_layout_for(unsigned minor, struct ur_glibc_layout *out);

/* Read len bytes at addr into buf: returns the bytes that could be read
 * (unreadable ones are zeroed). */
typedef size_t (*ur_gh_read_fn)(void *ctx, uint64_t addr, void *buf, size_t len);

struct ur_gh_in {
  const struct ur_glibc_layout *layout;
  ur_gh_read_fn read;
  void *ctx;
  uint64_t main_arena;
  uint64_t mp;
  const uint64_t *tcaches; /* each thread's `tcache` value (0: none yet) */
  size_t ntcaches;
  /* Sorted (begin, end) pairs: the private writable anonymous memory, where
   * chunks mmap'ed on their own are looked for (outside every heap). */
  const uint64_t *anon;
  size_t nanon;
  uint64_t page_size;
  /* Sorted (begin, end) pairs where the memory has pages (NULL: anywhere).
   * Read through /proc, an absent page of a private mapping would be
   * mapped in (the zero page) by the read; a header is never on one. */
  const uint64_t *present;
  size_t npresent;
};

struct ur_gh_stats {
  uint64_t arenas, heaps, chunks, in_use, in_use_bytes;
  uint64_t free_binned, free_fast, free_tcache;
  uint64_t mmapped, mmapped_bytes;
  uint64_t internal; /* tcache structures and heap-end remnants: glibc's own */
};

struct ur_gh_out {
  uint64_t *allocs; /* (user address, usable size) pairs in address order (malloc'ed) */
  size_t nallocs;
  struct ur_gh_stats stats;
  char error[240];
};

/* 0; -EPROTO (a check failed: out->error), -EBUSY (an arena is locked: a
 * thread is inside malloc; out->error), -ENOMEM. out->allocs is set only on
 * success; free it with free(). */
int ur_glibc_heap_walk(const struct ur_gh_in *in, struct ur_gh_out *out);

#endif
