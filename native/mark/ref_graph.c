#include "ref_graph.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "mem.h"

/* Candidates (words that pass the range reject) collected before they are
 * looked up: a lookup is a page entry (page_index.h), else a bucket and the
 * index entries it names, and a batch lets those misses overlap (the entry
 * or bucket is prefetched when the word is read, the index entries all
 * together before any is searched). */
#define BATCH 64
/* The page this many pages past the block being read is touched early (a
 * prefetch of its first line): a forked child's page-table entries start
 * "old", and the first load of each page waits for the page walker to set
 * its accessed bit, which the hardware prefetcher, stopping at page
 * boundaries, does not start. In a forked child of a 1 GB heap the graph's
 * pass took 215-235 ms of CPU instead of 285-340 (240 B blocks) and 270-290
 * instead of 330-370 (16-1040 B); 2 pages ahead saved a little less, 8 no
 * more. */
#define PAGES_AHEAD 4

struct build_shared {
  const struct ur_alloc_index *ix;
  struct ur_ref_graph *g;
  uint64_t max_edges;
  /* Per builder, atomic: the chunks still to build of its share, (next <<
   * 32) | end. Each builder takes its own from the front, in address order;
   * one that is done takes another's from the back. Shares, not one counter
   * dealing chunks in turn: a reader of live memory (native/scanner/
   * memory.c) loads 1 MiB at a time, and chunks dealt in turn would have
   * every builder load most of the others' 1 MiB pieces too. */
  uint64_t *shares;
  unsigned nshares;
  uint64_t edges;    /* atomic: edges of the finished chunks */
  int failed;        /* atomic: 0, or the first error */
};

struct builder {
  struct build_shared *s;
  struct ur_mem *mem;
  unsigned id;
  uint32_t *to;
  uint64_t len;
  size_t next_first; /* the next block whose first edge is still to be set */
  size_t block;      /* the block scan_part reads */
  uint64_t ahead;    /* the page last touched early (PAGES_AHEAD) */
  uint64_t cand[BATCH];
  uint32_t src[BATCH];
  size_t nc;
  uint64_t bytes_scanned;
};

static void open_blocks_up_to(struct builder *b, size_t block) {
  while (b->next_first <= block) b->s->g->first[b->next_first++] = (uint32_t)b->len;
}

static int flush(struct builder *b) {
  const struct ur_alloc_index *ix = b->s->ix;
  size_t lo[BATCH], hi[BATCH];
  ssize_t found[BATCH];
  for (size_t i = 0; i < b->nc; i++) {
    hi[i] = lo[i] = 0;
    found[i] = ur_alloc_index_direct(ix, b->cand[i]);
    if (found[i] == UR_PAGE_UNKNOWN) ur_alloc_index_prefetch_bucket(ix, b->cand[i]);
  }
  for (size_t i = 0; i < b->nc; i++) {
    if (found[i] != UR_PAGE_UNKNOWN) continue;
    if (!ur_alloc_index_range(ix, b->cand[i], &lo[i], &hi[i])) continue;
    __builtin_prefetch(&ix->pairs[2 * lo[i]]);
  }
  for (size_t i = 0; i < b->nc; i++) {
    ssize_t t = found[i];
    if (t == UR_PAGE_UNKNOWN)
      t = hi[i] == lo[i] ? -1 : ur_alloc_index_search(ix, b->cand[i], lo[i], hi[i]);
    uint32_t src = b->src[i];
    if (t < 0 || (size_t)t == src) continue;
    /* Every block of the batch before src is done: its edges end here. */
    open_blocks_up_to(b, src);
    if (b->len > b->s->g->first[src] && b->to[b->len - 1] == (uint32_t)t) continue;
    if (b->len >= b->s->max_edges) return -E2BIG;
    b->to[b->len++] = (uint32_t)t;
  }
  b->nc = 0;
  return 0;
}

/* The words of [a, end) (a 8-aligned) of block b->block. */
static int scan_part(void *ctx, uint64_t a, uint64_t end) {
  struct builder *b = ctx;
  const size_t i = b->block;
  const struct ur_alloc_index *ix = b->s->ix;
  /* Locals: the compiler cannot tell the candidate stores from the walker. */
  const uint64_t lo = ix->lo, span = ix->hi - ix->lo;
  const struct ur_page_index pages = ix->pages;
  size_t nc = b->nc;
  uint64_t ahead = b->ahead;
  while (a < end) {
    uint64_t avail;
    const uint8_t *p = ur_mem_view(b->mem, a, end, &avail);
    if (!p) return -ENOMEM;
    /* A page at a time, each touching the one PAGES_AHEAD on. */
    uint64_t page = (a >> UR_PAGE_SHIFT) + PAGES_AHEAD;
    if (page != ahead) {
      ur_mem_prefetch(b->mem, page << UR_PAGE_SHIFT);
      ahead = page;
    }
    uint64_t to_page = UR_PAGE_SIZE - (a & (UR_PAGE_SIZE - 1));
    if (avail > to_page) avail = to_page;
    /* a and view ends are 8-aligned, so the straddling last word is still
     * inside the view's buffer (as heap_walker.c's scan_range). */
    size_t nwords = (size_t)((avail + 7) / 8);
    for (size_t g = 0; g < nwords; g += 4) {
      size_t m = nwords - g < 4 ? nwords - g : 4;
      if (m == 4 && ur_zero_words4(p + 8 * g)) continue;
      for (size_t k = g; k < g + m; k++) {
        uint64_t v;
        memcpy(&v, p + 8 * k, 8);
        if (v - lo >= span) continue;
        if (nc == BATCH) {
          b->nc = nc;
          int r = flush(b);
          if (r) return r;
          nc = 0;
        }
        b->cand[nc] = v;
        b->src[nc++] = (uint32_t)i;
        __builtin_prefetch(pages.slots ? ur_page_slot(&pages, v)
                                       : ur_alloc_index_lookup_line(ix, v));
      }
    }
    b->bytes_scanned += avail;
    uint64_t next = a + 8 * (uint64_t)nwords;
    if (next < a) break; /* wrapped at the top of the address space */
    a = next;
  }
  b->ahead = ahead;
  b->nc = nc;
  return 0;
}

static int scan_block(struct builder *b, size_t i) {
  const struct ur_alloc_index *ix = b->s->ix;
  if (ur_block_begin(ix->pairs, i) > UINT64_MAX - 7) return 0;
  uint64_t a = (ur_block_begin(ix->pairs, i) + 7) & ~UINT64_C(7);
  b->block = i;
  return ur_mem_each_part(b->mem, a, ur_block_end(ix->pairs, i), scan_part, b);
}

static int build_chunk(struct builder *b, size_t c) {
  struct ur_ref_graph *g = b->s->g;
  size_t first = c << UR_GRAPH_CHUNK_SHIFT;
  size_t last = first + ((size_t)1 << UR_GRAPH_CHUNK_SHIFT);
  if (last > g->n) last = g->n;
  uint64_t start = b->len;
  b->next_first = first;
  for (size_t i = first; i < last; i++) {
    int r = scan_block(b, i);
    if (r) return r;
  }
  int r = flush(b);
  if (r) return r;
  if (last > 0) open_blocks_up_to(b, last - 1);
  g->chunk_end[c] = (uint32_t)b->len;
  g->chunk_array[c] = (uint8_t)b->id;
  uint64_t total = __atomic_add_fetch(&b->s->edges, b->len - start, __ATOMIC_RELAXED);
  return total > b->s->max_edges ? -E2BIG : 0;
}

/* The next chunk from share k: its front (own) or its back (taken). */
static int take(struct build_shared *s, unsigned k, int front, size_t *c) {
  uint64_t v = __atomic_load_n(&s->shares[k], __ATOMIC_RELAXED);
  for (;;) {
    uint64_t next = v >> 32, end = v & UINT32_MAX;
    if (next >= end) return 0;
    uint64_t nv = front ? ((next + 1) << 32) | end : (next << 32) | (end - 1);
    if (__atomic_compare_exchange_n(&s->shares[k], &v, nv, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      *c = (size_t)(front ? next : end - 1);
      return 1;
    }
  }
}

static int claim_chunk(struct builder *b, size_t *c) {
  struct build_shared *s = b->s;
  if (take(s, b->id, 1, c)) return 1;
  for (unsigned k = 1; k < s->nshares; k++)
    if (take(s, (b->id + k) % s->nshares, 0, c)) return 1;
  return 0;
}

static void build(void *arg) {
  struct builder *b = arg;
  struct build_shared *s = b->s;
  while (!__atomic_load_n(&s->failed, __ATOMIC_RELAXED)) {
    size_t c;
    if (!claim_chunk(b, &c)) break;
    int rc = build_chunk(b, c);
    if (rc) {
      int none = 0;
      __atomic_compare_exchange_n(&s->failed, &none, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
      break;
    }
  }
}

void ur_ref_graph_free(struct ur_ref_graph *g) {
  if (g->arrays)
    for (unsigned k = 0; k < g->narrays; k++) ur_big_free(g->arrays[k]);
  ur_big_free(g->arrays);
  ur_big_free(g->first);
  ur_big_free(g->chunk_end);
  ur_big_free(g->chunk_array);
  memset(g, 0, sizeof(*g));
}

int ur_ref_graph_build(struct ur_ref_graph *g, const struct ur_alloc_index *ix,
                       struct ur_mem *const *mems, unsigned n, const struct ur_team_ops *ops,
                       uint64_t max_edges, uint64_t *bytes_scanned, unsigned *threads) {
  ur_ref_graph_free(g);
  if (max_edges > UINT32_MAX - 1) max_edges = UINT32_MAX - 1;
  if (!ops || n < 1) n = 1;
  if (n > UR_WALKER_MAX_TEAM) n = UR_WALKER_MAX_TEAM;
  g->n = ix->n;
  g->nchunks = (ix->n + ((size_t)1 << UR_GRAPH_CHUNK_SHIFT) - 1) >> UR_GRAPH_CHUNK_SHIFT;
  g->narrays = n;
  g->first = ur_big_calloc(ix->n ? ix->n : 1, sizeof(*g->first));
  g->chunk_end = ur_big_calloc(g->nchunks ? g->nchunks : 1, sizeof(*g->chunk_end));
  g->chunk_array = ur_big_calloc(g->nchunks ? g->nchunks : 1, 1);
  g->arrays = ur_big_calloc(n, sizeof(*g->arrays));
  struct builder *bs = ur_big_calloc(n, sizeof(*bs));
  uint64_t *shares = ur_big_calloc(n, sizeof(*shares));
  int rc = -ENOMEM;
  if (!g->first || !g->chunk_end || !g->chunk_array || !g->arrays || !bs || !shares) goto out;
  /* Each array could hold the whole budget: address space only, pages
   * appear as edges are written. */
  for (unsigned k = 0; k < n; k++)
    if (!(g->arrays[k] = ur_big_calloc(max_edges ? max_edges : 1, sizeof(uint32_t)))) goto out;
  /* Chunk numbers fit in 32 bits: at most 2^32 blocks, 2^12 a chunk. */
  for (unsigned k = 0; k < n; k++)
    shares[k] = ((uint64_t)(g->nchunks * k / n) << 32) | (uint64_t)(g->nchunks * (k + 1) / n);
  struct build_shared s = {
      .ix = ix, .g = g, .max_edges = max_edges, .shares = shares, .nshares = n};
  unsigned started = 0;
  for (unsigned k = 0; k < n; k++)
    bs[k] = (struct builder){.s = &s, .mem = mems[k], .id = k, .to = g->arrays[k]};
  for (unsigned k = 1; k < n; k++)
    if (ops->start(ops->ctx, build, &bs[k]) == 0) started++;
  build(&bs[0]);
  if (started) ops->join(ops->ctx);
  rc = s.failed;
  if (!rc) {
    for (unsigned k = 0; k < n; k++) *bytes_scanned += bs[k].bytes_scanned;
    g->edges = s.edges;
    *threads = 1 + started;
  }
out:
  ur_big_free(bs);
  ur_big_free(shares);
  if (rc) ur_ref_graph_free(g);
  return rc;
}
