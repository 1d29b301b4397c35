#include "heap_walker.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "radix_sort.h"

/* Bucket entries needed with 2^shift-byte buckets (a bucket shared by the
 * end of one allocation and the start of the next counts once). */
static uint64_t count_buckets(const struct ur_walker *w, unsigned shift) {
  uint64_t total = 0, last = UINT64_MAX;
  for (size_t i = 0; i < w->n; i++) {
    uint64_t first = w->begin[i] >> shift, final = (w->end[i] - 1) >> shift;
    total += final - first + (first != last);
    last = final;
  }
  return total;
}

static void build_buckets(struct ur_walker *w) {
  /* The smallest buckets (from 256 bytes) that keep the index within about
   * two entries per allocation: then the search inside a bucket is a step or
   * two, where each step is a cache miss on a large heap. Huge allocations
   * push the buckets up (one entry per bucket they span). */
  unsigned shift = 8;
  uint64_t limit = 2 * (uint64_t)w->n + 4096;
  uint64_t count = count_buckets(w, shift);
  while (count > limit && shift < 40) count = count_buckets(w, ++shift);
  if (count > limit) return;
  uint64_t size = 1;
  while (size < 2 * count) size <<= 1;
  struct ur_bucket *t = ur_big_calloc(size, sizeof(*t));
  if (!t) return; /* binary search still works */
  uint64_t mask = size - 1;
  struct ur_bucket *cur = NULL;
  for (size_t i = 0; i < w->n; i++) {
    uint64_t first = w->begin[i] >> shift, final = (w->end[i] - 1) >> shift;
    for (uint64_t b = first;; b++) {
      if (cur && cur->key == b + 1) {
        cur->hi = (uint32_t)i + 1;
      } else {
        uint64_t j = ur_bucket_hash(b + 1) & mask;
        while (t[j].key) j = (j + 1) & mask;
        cur = &t[j];
        *cur = (struct ur_bucket){b + 1, (uint32_t)i, (uint32_t)i + 1};
      }
      if (b == final) break;
    }
  }
  w->buckets = t;
  w->bucket_mask = mask;
  w->bucket_shift = shift;
}

int ur_walker_init(struct ur_walker *w, struct ur_mem *mem, const uint64_t *allocs, size_t n) {
  memset(w, 0, sizeof(*w));
  w->mem = mem;
  w->allocs = allocs;
  if (n > UR_WALKER_MAX_ALLOCS) return -E2BIG;
  size_t cap = n ? n : 1;
  w->begin = ur_big_calloc(cap, sizeof(*w->begin));
  w->end = ur_big_calloc(cap, sizeof(*w->end));
  w->orig = ur_big_calloc(cap, sizeof(*w->orig));
  w->marked = ur_big_calloc(cap, 1);
  if (!w->begin || !w->end || !w->orig || !w->marked) goto nomem;
  for (size_t i = 0; i < n; i++) {
    w->begin[i] = allocs[2 * i];
    w->orig[i] = (uint32_t)i;
  }
  if (ur_radix_sort(w->begin, w->orig, n) < 0) goto nomem;
  uint64_t prev_end = 0, prev_b = 0;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t b = w->begin[i], s = allocs[2 * w->orig[i] + 1];
    uint64_t len = s ? s : 1;
    uint64_t e = (b + len < b) ? UINT64_MAX : b + len;
    if (i == 0 || b != prev_b) {
      w->distinct++;
      w->distinct_bytes += s;
    }
    prev_b = b;
    if (k > 0 && b < prev_end) {
      w->overlapping++;
      continue;
    }
    w->begin[k] = b;
    w->end[k] = e;
    w->orig[k] = w->orig[i];
    prev_end = e;
    k++;
  }
  w->n = k;
  if (k) {
    w->lo = w->begin[0];
    w->hi = prev_end;
    build_buckets(w);
  }
  return 0;
nomem:
  ur_walker_free(w);
  return -ENOMEM;
}

void ur_walker_free(struct ur_walker *w) {
  ur_big_free(w->begin);
  ur_big_free(w->end);
  ur_big_free(w->orig);
  ur_big_free(w->marked);
  ur_big_free(w->todo);
  ur_big_free(w->buckets);
  memset(w, 0, sizeof(*w));
}

int ur_walker_scan(struct ur_walker *w, uint64_t begin, uint64_t end, ur_hit_fn fn, void *ctx) {
  if (begin > UINT64_MAX - 7) return 0;
  uint64_t a = (begin + 7) & ~UINT64_C(7);
  const uint64_t lo = w->lo, span = w->hi - w->lo;
  while (a < end) {
    uint64_t avail;
    const uint8_t *p = ur_mem_view(w->mem, a, end, &avail);
    if (!p) return -ENOMEM;
    /* a and chunk ends are 8-aligned, so the straddling last word is still
     * inside the chunk buffer. */
    size_t nwords = (size_t)((avail + 7) / 8);
    for (size_t i = 0; i < nwords; i++) {
      uint64_t v;
      memcpy(&v, p + 8 * i, 8);
      if (v - lo >= span) continue;
      ssize_t idx = ur_walker_find(w, v);
      if (idx >= 0) {
        int r = fn(ctx, (size_t)idx);
        if (r) return r;
      }
    }
    w->bytes_scanned += avail;
    uint64_t next = a + 8 * (uint64_t)nwords;
    if (next < a) break; /* wrapped at the top of the address space */
    a = next;
  }
  return 0;
}

static int push_todo(struct ur_walker *w, uint32_t idx) {
  if (w->todo_len == w->todo_cap) {
    size_t cap = w->todo_cap ? w->todo_cap * 2 : 4096;
    uint32_t *t = ur_big_realloc(w->todo, cap * sizeof(*t));
    if (!t) return -ENOMEM;
    w->todo = t;
    w->todo_cap = cap;
  }
  w->todo[w->todo_len++] = idx;
  return 0;
}

static int mark_hit(void *ctx, size_t idx) {
  struct ur_walker *w = ctx;
  if (w->marked[idx]) return 0;
  w->marked[idx] = 1;
  /* Popped soon (the work stack is LIFO): have its first line on the way. */
  ur_mem_prefetch(w->mem, w->begin[idx]);
  return push_todo(w, (uint32_t)idx);
}

/*
 * The mark is a random walk: each block costs a handful of dependent cache
 * misses (its data, the bucket, begin/end, the mark byte). A software
 * pipeline lets them overlap: blocks are taken off the work stack DEPTH
 * ahead of their scan and their lines prefetched then, so each block's data
 * arrives while the blocks before it are scanned; the words that pass the
 * range reject collect with their buckets prefetched and are resolved (index
 * entries prefetched, then searched and marked) a few blocks' worth at a
 * time. It replaced batches of 32 blocks each prefetched whole before any
 * was scanned: a deep burst of prefetches only queues behind the few
 * line-fill buffers, while the pipeline keeps them busy all along (1 KiB
 * trees: 0.26-0.28x memcpy before, 0.43-0.44x after; bench/mark_bench.py,
 * docs/pause.md).
 */
#define DEPTH 8                 /* blocks in flight */
#define RESOLVE_AT 64           /* candidates collected before resolving */
#define MAX_CANDIDATES 1024
#define PREFETCH_BYTES 2048     /* of each block; the hardware streams the rest */

struct view {
  const uint8_t *p;
  uint64_t addr, end, avail;
};

static int resolve(struct ur_walker *w, const uint64_t *cand, size_t nc) {
  size_t lo[MAX_CANDIDATES], hi[MAX_CANDIDATES];
  for (size_t i = 0; i < nc; i++) {
    if (!ur_walker_range(w, cand[i], &lo[i], &hi[i])) {
      hi[i] = lo[i] = 0;
      continue;
    }
    __builtin_prefetch(&w->begin[lo[i]]);
    __builtin_prefetch(&w->end[lo[i]]);
    __builtin_prefetch(&w->marked[lo[i]]);
  }
  for (size_t i = 0; i < nc; i++) {
    if (hi[i] == lo[i]) continue;
    ssize_t idx = ur_walker_search(w, cand[i], lo[i], hi[i]);
    if (idx >= 0) {
      int r = mark_hit(w, (size_t)idx);
      if (r) return r;
    }
  }
  return 0;
}

struct pipeline {
  struct view ring[DEPTH];
  size_t head, count;
  struct view rest[DEPTH]; /* blocks reaching past their first view */
  size_t nrest;
  uint64_t cand[MAX_CANDIDATES];
  size_t nc;
};

/* Views stay valid only while the backend evicts nothing: a view joins the
 * ring only while the backend has room for every view in flight (or none
 * is), and the rest of a long block waits until the ring is empty. */
static int fill(struct ur_walker *w, struct pipeline *pl) {
  while (pl->count < DEPTH && w->todo_len && !pl->nrest &&
         (pl->count == 0 || pl->count < w->mem->room)) {
    uint32_t idx = w->todo[--w->todo_len];
    struct view *it = &pl->ring[(pl->head + pl->count) % DEPTH];
    it->addr = (w->begin[idx] + 7) & ~UINT64_C(7);
    it->end = w->end[idx];
    if (it->addr >= it->end) continue;
    it->p = ur_mem_view(w->mem, it->addr, it->end, &it->avail);
    if (!it->p) return -ENOMEM;
    uint64_t span = it->avail < PREFETCH_BYTES ? it->avail : PREFETCH_BYTES;
    for (uint64_t off = 0; off < span; off += 64) __builtin_prefetch(it->p + off);
    pl->count++;
  }
  return 0;
}

static int flush_candidates(struct ur_walker *w, struct pipeline *pl) {
  int r = resolve(w, pl->cand, pl->nc);
  pl->nc = 0;
  return r;
}

/* Scan the oldest block in flight: its words that pass the range reject
 * become candidates. */
static int scan_oldest(struct ur_walker *w, struct pipeline *pl) {
  struct view *it = &pl->ring[pl->head];
  pl->head = (pl->head + 1) % DEPTH;
  pl->count--;
  const uint64_t lo = w->lo, span = w->hi - w->lo;
  size_t nwords = (size_t)((it->avail + 7) / 8);
  for (size_t i = 0; i < nwords; i++) {
    uint64_t v;
    memcpy(&v, it->p + 8 * i, 8);
    if (v - lo >= span) continue;
    if (pl->nc == MAX_CANDIDATES) {
      int r = flush_candidates(w, pl);
      if (r) return r;
    }
    pl->cand[pl->nc++] = v;
    if (w->buckets)
      __builtin_prefetch(&w->buckets[ur_bucket_hash((v >> w->bucket_shift) + 1) & w->bucket_mask]);
  }
  w->bytes_scanned += it->avail;
  it->addr += 8 * (uint64_t)nwords;
  if (it->addr < it->end) pl->rest[pl->nrest++] = *it;
  return 0;
}

static int drain(struct ur_walker *w) {
  struct pipeline state, *pl = &state;
  pl->head = pl->count = pl->nrest = pl->nc = 0;
  for (;;) {
    int r = fill(w, pl);
    if (r) return r;
    if (pl->count) {
      if ((r = scan_oldest(w, pl)) != 0) return r;
      if (pl->nc >= RESOLVE_AT && (r = flush_candidates(w, pl)) != 0) return r;
      continue;
    }
    /* Nothing in flight: finish long blocks, then what is left to resolve. */
    for (size_t k = 0; k < pl->nrest; k++)
      if ((r = ur_walker_scan(w, pl->rest[k].addr, pl->rest[k].end, mark_hit, w)) != 0) return r;
    pl->nrest = 0;
    if (pl->nc) {
      if ((r = flush_candidates(w, pl)) != 0) return r;
      continue;
    }
    if (!w->todo_len) return 0;
  }
}

int ur_walker_mark(struct ur_walker *w, const uint64_t *ranges, size_t nranges,
                   const uint64_t *values, size_t nvalues) {
  if (!w->n) return 0;
  for (size_t i = 0; i < nranges; i++) {
    int r = ur_walker_scan(w, ranges[2 * i], ranges[2 * i + 1], mark_hit, w);
    if (!r) r = drain(w);
    if (r) return r;
  }
  for (size_t i = 0; i < nvalues; i++) {
    ssize_t idx = ur_walker_find(w, values[i]);
    if (idx >= 0) {
      int r = mark_hit(w, (size_t)idx);
      if (r) return r;
    }
  }
  return drain(w);
}
