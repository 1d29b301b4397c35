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
  int partial;
};

struct builder {
  struct build_shared *s;
  struct ur_mem *mem;
  unsigned id;
  uint32_t *to;
  uint64_t len;
  size_t next_first; /* the next block whose first edge is still to be set */
  size_t block;      /* the long block scan_part reads */
  uint64_t ahead;    /* the page last touched early (PAGES_AHEAD) */
  /* Edges past this end the build (max_edges) or, in a partial graph, make
   * the block dense (the chunk's share); dense_src: the last such block. */
  uint64_t limit;
  size_t dense_src;
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
    if (src == b->dense_src) continue;
    if (b->len > b->s->g->first[src] && b->to[b->len - 1] == (uint32_t)t) continue;
    if (b->len >= b->limit) {
      if (!b->s->partial) return -E2BIG;
      /* Over the chunk's share: src keeps no edge (blocks after it in the
       * chunk may still fit in what it gives back). */
      struct ur_ref_graph *g = b->s->g;
      g->dense[src >> 3] |= (uint8_t)(1u << (src & 7));
      b->len = g->first[src];
      b->dense_src = src;
      continue;
    }
    b->to[b->len++] = (uint32_t)t;
  }
  b->nc = 0;
  return 0;
}

/* What scan_words needs of the index, loaded once per run of blocks. */
struct scan_consts {
  uint64_t lo, span;
  struct ur_page_index pages;
  const struct ur_alloc_index *ix;
};

/* The words of [a, end) (a 8-aligned) of block i, a page at a time, each
 * page touching the one PAGES_AHEAD on; *nc and *ahead are the builder's,
 * kept in the caller's registers across the blocks of a run. */
static inline __attribute__((always_inline)) int scan_words(struct builder *b,
                                                            const struct scan_consts *k,
                                                            size_t i, uint64_t a, uint64_t end,
                                                            size_t *ncp, uint64_t *aheadp) {
  size_t nc = *ncp;
  uint64_t ahead = *aheadp;
  int rc = 0;
  while (a < end) {
    uint64_t avail;
    const uint8_t *p = ur_mem_view(b->mem, a, end, &avail);
    if (!p) {
      rc = -ENOMEM;
      break;
    }
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
      for (size_t w = g; w < g + m; w++) {
        uint64_t v;
        memcpy(&v, p + 8 * w, 8);
        if (v - k->lo >= k->span) continue;
        if (nc == BATCH) {
          b->nc = nc;
          rc = flush(b);
          nc = 0;
          if (rc) goto out;
        }
        b->cand[nc] = v;
        b->src[nc++] = (uint32_t)i;
        __builtin_prefetch(k->pages.slots ? ur_page_slot(&k->pages, v)
                                          : ur_alloc_index_lookup_line(k->ix, v));
      }
    }
    b->bytes_scanned += avail;
    uint64_t next = a + 8 * (uint64_t)nwords;
    if (next < a) break; /* wrapped at the top of the address space */
    a = next;
  }
out:
  *ncp = nc;
  *aheadp = ahead;
  return rc;
}

static void consts_of(const struct ur_alloc_index *ix, struct scan_consts *k) {
  *k = (struct scan_consts){ix->lo, ix->hi - ix->lo, ix->pages, ix};
}

/* The words of [a, end) (a 8-aligned) of block b->block: a part of a long
 * block (ur_mem_each_part). */
static int scan_part(void *ctx, uint64_t a, uint64_t end) {
  struct builder *b = ctx;
  struct scan_consts k;
  consts_of(b->s->ix, &k);
  size_t nc = b->nc;
  uint64_t ahead = b->ahead;
  int rc = scan_words(b, &k, b->block, a, end, &nc, &ahead);
  b->nc = nc;
  b->ahead = ahead;
  return rc;
}

/* Blocks [first, last) in order: the short ones read in this loop, the
 * index's bounds and the batch's fill kept in registers across them (a call
 * through ur_mem_each_part per block cost a 1 GB heap of 240 B blocks ~10%
 * of its graph's pass); a long one, which may be read only where its pages
 * exist, through ur_mem_each_part. */
static int scan_blocks(struct builder *b, size_t first, size_t last) {
  const struct ur_alloc_index *ix = b->s->ix;
  struct scan_consts k;
  consts_of(ix, &k);
  size_t nc = b->nc;
  uint64_t ahead = b->ahead;
  int rc = 0;
  for (size_t i = first; i < last && !rc; i++) {
    uint64_t begin = ur_block_begin(ix->pairs, i), end = ur_block_end(ix->pairs, i);
    if (begin > UINT64_MAX - 7) continue;
    uint64_t a = (begin + 7) & ~UINT64_C(7);
    if (b->mem->present && end > a && end - a >= UR_SPARSE_MIN) {
      b->nc = nc;
      b->ahead = ahead;
      b->block = i;
      rc = ur_mem_each_part(b->mem, a, end, scan_part, b);
      nc = b->nc;
      ahead = b->ahead;
      continue;
    }
    rc = scan_words(b, &k, i, a, end, &nc, &ahead);
  }
  b->nc = nc;
  b->ahead = ahead;
  return rc;
}

static int build_chunk(struct builder *b, size_t c) {
  struct ur_ref_graph *g = b->s->g;
  size_t first = c << UR_GRAPH_CHUNK_SHIFT;
  size_t last = first + ((size_t)1 << UR_GRAPH_CHUNK_SHIFT);
  if (last > g->n) last = g->n;
  uint64_t start = b->len;
  b->next_first = first;
  b->limit = b->s->max_edges;
  if (b->s->partial) b->limit = start + b->s->max_edges * (last - first) / (g->n ? g->n : 1);
  b->dense_src = SIZE_MAX;
  int r = scan_blocks(b, first, last);
  if (r) return r;
  r = flush(b);
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
  ur_big_free(g->dense);
  memset(g, 0, sizeof(*g));
}

int ur_ref_graph_build(struct ur_ref_graph *g, const struct ur_alloc_index *ix,
                       struct ur_mem *const *mems, unsigned n, const struct ur_team_ops *ops,
                       uint64_t max_edges, int partial, uint64_t *bytes_scanned,
                       unsigned *threads) {
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
  if (partial) g->dense = ur_big_calloc(ix->n / 8 + 1, 1);
  if (!g->first || !g->chunk_end || !g->chunk_array || !g->arrays || !bs || !shares ||
      (partial && !g->dense))
    goto out;
  /* Each array could hold the whole budget: address space only, pages
   * appear as edges are written. */
  for (unsigned k = 0; k < n; k++)
    if (!(g->arrays[k] = ur_big_calloc(max_edges ? max_edges : 1, sizeof(uint32_t)))) goto out;
  /* Chunk numbers fit in 32 bits: at most 2^32 blocks, 2^12 a chunk. */
  for (unsigned k = 0; k < n; k++)
    shares[k] = ((uint64_t)(g->nchunks * k / n) << 32) | (uint64_t)(g->nchunks * (k + 1) / n);
  struct build_shared s = {
      .ix = ix, .g = g, .max_edges = max_edges, .shares = shares, .nshares = n,
      .partial = partial};
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
