#include "heap_walker.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "radix_sort.h"
#include "work_pool.h"

/* Whether the caller's pairs can be indexed where they lie: sorted by
 * begin, none overlapping (the registry reader's are); their sizes summed. */
static int in_order(const uint64_t *allocs, size_t n, uint64_t *bytes) {
  uint64_t prev_end = 0, total = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && ur_block_begin(allocs, i) < prev_end) return 0;
    prev_end = ur_block_end(allocs, i);
    total += allocs[2 * i + 1];
  }
  *bytes = total;
  return 1;
}

/* The sorted copy, for pairs that come in any order or overlap: begins
 * sorted with their indices, overlaps dropped, then widened in place into
 * (begin, size) pairs from the back (pair j's slots, 2j and 2j + 1, lie at
 * or past the begin j still to be read). */
static int sorted_copy(struct ur_walker *w, const uint64_t *allocs, size_t n) {
  size_t cap = n ? n : 1;
  uint64_t *keys = ur_big_calloc(cap, sizeof(*keys));
  w->orig = ur_big_calloc(cap, sizeof(*w->orig));
  if (!keys || !w->orig) goto nomem;
  for (size_t i = 0; i < n; i++) {
    keys[i] = allocs[2 * i];
    w->orig[i] = (uint32_t)i;
  }
  if (ur_radix_sort(keys, w->orig, n) < 0) goto nomem;
  uint64_t prev_end = 0, prev_b = 0;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t b = keys[i], s = allocs[2 * w->orig[i] + 1];
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
    keys[k] = b;
    w->orig[k] = w->orig[i];
    prev_end = e;
    k++;
  }
  uint64_t *own = ur_big_realloc(keys, 2 * (k ? k : 1) * sizeof(*own));
  if (!own) goto nomem;
  for (size_t j = k; j-- > 0;) {
    own[2 * j] = own[j];
    own[2 * j + 1] = allocs[2 * (size_t)w->orig[j] + 1];
  }
  w->own = own;
  w->pairs = own;
  w->n = k;
  return 0;
nomem:
  ur_big_free(keys);
  return -ENOMEM;
}

int ur_walker_init(struct ur_walker *w, struct ur_mem *mem, const uint64_t *allocs, size_t n,
                   enum ur_sizes sizes) {
  memset(w, 0, sizeof(*w));
  w->mem = mem;
  w->allocs = allocs;
  if (n > UR_WALKER_MAX_ALLOCS) return -E2BIG;
  w->marked = ur_big_calloc(n ? n : 1, 1);
  if (!w->marked) goto nomem;
  if (in_order(allocs, n, &w->distinct_bytes)) {
    w->pairs = allocs;
    w->n = w->distinct = n;
  } else if (sorted_copy(w, allocs, n) < 0) {
    goto nomem;
  }
  w->max_edges = UR_GRAPH_EDGES_PER_ALLOC * (uint64_t)w->n + UR_GRAPH_EDGES_FIXED;
  if (ur_alloc_index_build(&w->index, w->pairs, w->n, sizes) < 0) goto nomem;
  return 0;
nomem:
  ur_walker_free(w);
  return -ENOMEM;
}

void ur_walker_free(struct ur_walker *w) {
  ur_big_free(w->own);
  ur_big_free(w->orig);
  ur_big_free(w->marked);
  ur_big_free(w->pending);
  ur_alloc_index_free(&w->index);
  ur_ref_graph_free(&w->graph);
  memset(w, 0, sizeof(*w));
}

struct range_scan {
  const struct ur_walker *w;
  struct ur_mem *mem;
  uint64_t *scanned;
  ur_hit_fn fn;
  void *ctx;
};

/* The words of [a, end), a 8-aligned (scan_range). */
static int scan_part(void *arg, uint64_t a, uint64_t end) {
  const struct range_scan *rs = arg;
  const struct ur_walker *w = rs->w;
  struct ur_mem *mem = rs->mem;
  uint64_t *scanned = rs->scanned;
  ur_hit_fn fn = rs->fn;
  void *ctx = rs->ctx;
  const uint64_t lo = w->index.lo, span = w->index.hi - w->index.lo;
  while (a < end) {
    uint64_t avail;
    const uint8_t *p = ur_mem_view(mem, a, end, &avail);
    if (!p) return -ENOMEM;
    /* a and chunk ends are 8-aligned, so the straddling last word is still
     * inside the chunk buffer. */
    size_t nwords = (size_t)((avail + 7) / 8);
    for (size_t g = 0; g < nwords; g += 4) {
      size_t m = nwords - g < 4 ? nwords - g : 4;
      if (m == 4 && ur_zero_words4(p + 8 * g)) continue;
      for (size_t i = g; i < g + m; i++) {
        uint64_t v;
        memcpy(&v, p + 8 * i, 8);
        if (v - lo >= span) continue;
        ssize_t idx = ur_walker_find(w, v);
        if (idx >= 0) {
          int r = fn(ctx, (size_t)idx);
          if (r) return r;
        }
      }
    }
    *scanned += avail;
    uint64_t next = a + 8 * (uint64_t)nwords;
    if (next < a) break; /* wrapped at the top of the address space */
    a = next;
  }
  return 0;
}

/* Every 8-aligned word of [begin, end) that points into an allocation goes
 * to fn; the bytes read are added to *scanned. */
static int scan_range(const struct ur_walker *w, struct ur_mem *mem, uint64_t *scanned,
                      uint64_t begin, uint64_t end, ur_hit_fn fn, void *ctx) {
  if (begin > UINT64_MAX - 7) return 0;
  uint64_t a = (begin + 7) & ~UINT64_C(7);
  struct range_scan rs = {w, mem, scanned, fn, ctx};
  return ur_mem_each_part(mem, a, end, scan_part, &rs);
}

int ur_walker_scan(struct ur_walker *w, uint64_t begin, uint64_t end, ur_hit_fn fn, void *ctx) {
  return scan_range(w, w->mem, &w->bytes_scanned, begin, end, fn, ctx);
}

/* One marking thread: its own view of memory and its own work stack. The
 * walker's marks are shared; with a team each is claimed by one atomic
 * exchange, so every block is scanned by exactly one thread. */
struct marker {
  struct ur_walker *w;
  struct ur_mem *mem;
  struct ur_work_pool *pool; /* NULL: marking alone */
  uint32_t *todo;
  size_t todo_len, todo_cap;
  uint64_t bytes_scanned;
  int graph; /* follow the reference graph's edges, not the blocks' words */
  int passing; /* reading a partial graph's dense blocks (read_passes) */
};

/* Room for n more entries on the work stack. */
static int reserve_todo(struct marker *m, size_t n) {
  if (m->todo_cap - m->todo_len >= n) return 0;
  size_t cap = m->todo_cap ? m->todo_cap : 4096;
  while (cap - m->todo_len < n) cap *= 2;
  uint32_t *t = ur_big_realloc(m->todo, cap * sizeof(*t));
  if (!t) return -ENOMEM;
  m->todo = t;
  m->todo_cap = cap;
  return 0;
}

static int push_todo(struct marker *m, uint32_t idx) {
  if (m->todo_len == m->todo_cap && reserve_todo(m, 1) != 0) return -ENOMEM;
  m->todo[m->todo_len++] = idx;
  return 0;
}

/* Mark block idx for this thread: 0 if it was marked already. A load and
 * a store, not an exchange, even in a team: a locked exchange waits for its
 * line and keeps the thread's later misses from overlapping it. Two threads
 * that both see the block unmarked both follow it; that is only work done
 * twice, and it takes a race within a few instructions. */
static int claim(struct marker *m, size_t idx) {
  uint8_t *mark = &m->w->marked[idx];
  if (__atomic_load_n(mark, __ATOMIC_RELAXED)) return 0;
  __atomic_store_n(mark, 1, __ATOMIC_RELAXED);
  return 1;
}

static int mark_hit(void *ctx, size_t idx) {
  struct marker *m = ctx;
  if (!claim(m, idx)) return 0;
  /* Popped soon (the work stack is LIFO): have its first line on the way. */
  ur_mem_prefetch(m->mem, ur_walker_begin(m->w, idx));
  return push_todo(m, (uint32_t)idx);
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
 * line-fill buffers, while the pipeline keeps them busy all along
 * (bench/mark_bench.py; docs/design.md, "Mark and fold").
 */
#define DEPTH 8                 /* blocks in flight */
#define RESOLVE_AT 64           /* candidates collected before resolving */
#define MAX_CANDIDATES 1024
#define PREFETCH_BYTES 2048     /* of each block; the hardware streams the rest */
#define SHARE_MIN 64            /* a stack this deep gives to a waiting thread */
#define SHARE_MAX 4096          /* items moved at once */

struct view {
  const uint8_t *p;
  uint64_t addr, end, avail;
};

static int resolve(struct marker *m, const uint64_t *cand, size_t nc) {
  const struct ur_walker *w = m->w;
  size_t lo[MAX_CANDIDATES], hi[MAX_CANDIDATES];
  ssize_t found[MAX_CANDIDATES];
  for (size_t i = 0; i < nc; i++) {
    hi[i] = lo[i] = 0;
    if ((found[i] = ur_alloc_index_direct(&w->index, cand[i])) != UR_PAGE_UNKNOWN) {
      if (found[i] >= 0) __builtin_prefetch(&w->marked[found[i]]);
      continue;
    }
    ur_alloc_index_prefetch_bucket(&w->index, cand[i]);
  }
  for (size_t i = 0; i < nc; i++) {
    if (found[i] != UR_PAGE_UNKNOWN) continue;
    if (!ur_alloc_index_range(&w->index, cand[i], &lo[i], &hi[i])) continue;
    __builtin_prefetch(&w->pairs[2 * lo[i]]);
    __builtin_prefetch(&w->marked[lo[i]]);
  }
  for (size_t i = 0; i < nc; i++) {
    ssize_t idx = found[i];
    if (idx == UR_PAGE_UNKNOWN)
      idx = hi[i] == lo[i] ? -1 : ur_alloc_index_search(&w->index, cand[i], lo[i], hi[i]);
    if (idx >= 0) {
      int r = mark_hit(m, (size_t)idx);
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

/* Give the bottom of the stack (the oldest entries: near the roots, so
 * likely the biggest subgraphs) to a thread that has nothing to do. */
static int share(struct marker *m) {
  size_t n = m->todo_len / 2;
  if (n > SHARE_MAX) n = SHARE_MAX;
  int r = ur_work_pool_give(m->pool, m->todo, n);
  if (r) return r;
  /* The top n fill the gap (n <= half: no overlap). Moving the whole stack
   * down cost a copy of it per share: seconds for a block holding 9M
   * pointers, whose targets all sit on one stack. */
  memcpy(m->todo, m->todo + m->todo_len - n, n * sizeof(*m->todo));
  m->todo_len -= n;
  return 0;
}

/* Views stay valid only while the backend evicts nothing: a view joins the
 * ring only while the backend has room for every view in flight (or none
 * is), and the rest of a long block waits until the ring is empty. */
static int fill(struct marker *m, struct pipeline *pl) {
  const struct ur_walker *w = m->w;
  if (m->pool && m->todo_len >= SHARE_MIN && ur_work_pool_hungry(m->pool)) {
    int r = share(m);
    if (r) return r;
  }
  while (pl->count < DEPTH && m->todo_len && !pl->nrest &&
         (pl->count == 0 || pl->count < m->mem->room)) {
    uint32_t idx = m->todo[--m->todo_len];
    struct view *it = &pl->ring[(pl->head + pl->count) % DEPTH];
    it->addr = (ur_walker_begin(w, idx) + 7) & ~UINT64_C(7);
    it->end = ur_walker_end(w, idx);
    if (it->addr >= it->end) continue;
    if (m->mem->present && it->end - it->addr >= UR_SPARSE_MIN) {
      /* Read where its pages exist (scan_range), once the ring is empty;
       * no more is taken meanwhile (nrest). */
      pl->rest[pl->nrest++] = *it;
      continue;
    }
    it->p = ur_mem_view(m->mem, it->addr, it->end, &it->avail);
    if (!it->p) return -ENOMEM;
    uint64_t span = it->avail < PREFETCH_BYTES ? it->avail : PREFETCH_BYTES;
    for (uint64_t off = 0; off < span; off += 64) __builtin_prefetch(it->p + off);
    pl->count++;
  }
  return 0;
}

static int flush_candidates(struct marker *m, struct pipeline *pl) {
  int r = resolve(m, pl->cand, pl->nc);
  pl->nc = 0;
  return r;
}

/* Scan the oldest block in flight: its words that pass the range reject
 * become candidates. */
static int scan_oldest(struct marker *m, struct pipeline *pl) {
  const struct ur_walker *w = m->w;
  struct view *it = &pl->ring[pl->head];
  pl->head = (pl->head + 1) % DEPTH;
  pl->count--;
  const uint64_t lo = w->index.lo, span = w->index.hi - w->index.lo;
  size_t nwords = (size_t)((it->avail + 7) / 8);
  for (size_t g = 0; g < nwords; g += 4) {
    size_t in_group = nwords - g < 4 ? nwords - g : 4;
    if (in_group == 4 && ur_zero_words4(it->p + 8 * g)) continue;
    for (size_t i = g; i < g + in_group; i++) {
      uint64_t v;
      memcpy(&v, it->p + 8 * i, 8);
      if (v - lo >= span) continue;
      if (pl->nc == MAX_CANDIDATES) {
        int r = flush_candidates(m, pl);
        if (r) return r;
      }
      pl->cand[pl->nc++] = v;
      __builtin_prefetch(ur_alloc_index_lookup_line(&w->index, v));
    }
  }
  m->bytes_scanned += it->avail;
  it->addr += 8 * (uint64_t)nwords;
  if (it->addr < it->end) pl->rest[pl->nrest++] = *it;
  return 0;
}

/* Mark until this thread's own stack is empty. */
static int drain(struct marker *m) {
  struct pipeline state, *pl = &state;
  pl->head = pl->count = pl->nrest = pl->nc = 0;
  for (;;) {
    int r = fill(m, pl);
    if (r) return r;
    if (pl->count) {
      if ((r = scan_oldest(m, pl)) != 0) return r;
      if (pl->nc >= RESOLVE_AT && (r = flush_candidates(m, pl)) != 0) return r;
      continue;
    }
    /* Nothing in flight: finish long blocks, then what is left to resolve. */
    for (size_t k = 0; k < pl->nrest; k++)
      if ((r = scan_range(m->w, m->mem, &m->bytes_scanned, pl->rest[k].addr, pl->rest[k].end,
                          mark_hit, m)) != 0)
        return r;
    pl->nrest = 0;
    if (pl->nc) {
      if ((r = flush_candidates(m, pl)) != 0) return r;
      continue;
    }
    if (!m->todo_len) return 0;
  }
}

/*
 * Marking along a built graph. A block costs a few loads (its edge run,
 * its targets' mark bytes), mostly in cache; they overlap as the block's
 * graph entry is prefetched when it is marked and the edge runs of
 * GRAPH_BATCH blocks off the stack are prefetched together before any is
 * followed. A team shares work as the walk does.
 */
#define GRAPH_BATCH 64

/* A partial graph's dense block, reached: marked 2 (its words still to be
 * read) and its chunk flagged for the next pass over it; in a pass it goes
 * on the stack too, to be read at once if its memory is held by then. */
static int defer(struct marker *m, size_t idx) {
  __atomic_store_n(&m->w->marked[idx], 2, __ATOMIC_RELAXED);
  __atomic_store_n(&m->w->pending[idx >> UR_GRAPH_CHUNK_SHIFT], 1, __ATOMIC_RELAXED);
  return m->passing ? push_todo(m, (uint32_t)idx) : 0;
}

/* partial: the graph has dense blocks (a constant where inlined, so a
 * whole graph's mark pays nothing for them). */
static inline __attribute__((always_inline)) int graph_hit_in(struct marker *m, size_t idx,
                                                              int partial) {
  if (!claim(m, idx)) return 0;
  if (partial && ur_ref_graph_dense(&m->w->graph, idx)) return defer(m, idx);
  __builtin_prefetch(&m->w->graph.first[idx]);
  return push_todo(m, (uint32_t)idx);
}

static int graph_hit(void *ctx, size_t idx) { return graph_hit_in(ctx, idx, 0); }
static int partial_hit(void *ctx, size_t idx) { return graph_hit_in(ctx, idx, 1); }

static inline __attribute__((always_inline)) int graph_drain_in(struct marker *m, int partial) {
  const struct ur_ref_graph *g = &m->w->graph;
  while (m->todo_len) {
    if (m->pool && m->todo_len >= SHARE_MIN && ur_work_pool_hungry(m->pool)) {
      int r = share(m);
      if (r) return r;
    }
    size_t k = m->todo_len < GRAPH_BATCH ? m->todo_len : GRAPH_BATCH;
    const uint32_t *to[GRAPH_BATCH];
    size_t count[GRAPH_BATCH];
    m->todo_len -= k;
    for (size_t i = 0; i < k; i++) {
      to[i] = ur_ref_graph_edges(g, m->todo[m->todo_len + i], &count[i]);
      __builtin_prefetch(to[i]);
    }
    for (size_t i = 0; i < k; i++)
      for (size_t e = 0; e < count[i]; e++) {
        int r = graph_hit_in(m, to[i][e], partial);
        if (r) return r;
      }
  }
  return 0;
}

static int graph_drain(struct marker *m) {
  return m->w->graph.dense ? graph_drain_in(m, 1) : graph_drain_in(m, 0);
}

/*
 * A partial graph's dense blocks (ref_graph.h), read after the team has
 * followed every edge it has. A pass reads the waiting ones in address
 * order, chunk by chunk: a reader of live memory then loads each 1 MiB
 * piece at most once a pass, as the graph's build did. What a block points
 * to is marked as the team marks: along the edges, and a dense block met on
 * the way is read at once when its memory is held already (so a chain of
 * dense blocks within the cache is one walk), else it waits for the next
 * pass. Passes alternate up and down, so a chain laid out in either
 * direction is one pass; one in random order takes a pass per link that
 * leaves the cache, and the reader's read bound (or UR_WALKER_EXTRA_PASSES
 * more passes than chunks) ends it.
 */
static int read_dense(struct marker *m, size_t idx) {
  m->w->marked[idx] = 1;
  return scan_range(m->w, m->mem, &m->bytes_scanned, ur_walker_begin(m->w, idx),
                    ur_walker_end(m->w, idx), partial_hit, m);
}

static int pass_drain(struct marker *m) {
  const struct ur_walker *w = m->w;
  while (m->todo_len) {
    uint32_t idx = m->todo[--m->todo_len];
    int r = 0;
    if (!ur_ref_graph_dense(&w->graph, idx)) {
      size_t count;
      const uint32_t *to = ur_ref_graph_edges(&w->graph, idx, &count);
      for (size_t e = 0; e < count && !r; e++) r = partial_hit(m, to[e]);
    } else if (w->marked[idx] == 2 && ur_mem_holds(m->mem, ur_walker_begin(w, idx))) {
      r = read_dense(m, idx);
    }
    if (r) return r;
  }
  return 0;
}

/* The waiting blocks of graph chunk c, upward or downward; *any set when
 * there was one (a chunk flagged again for a block this pass then read
 * has none). */
static int pass_chunk(struct marker *m, size_t c, int down, int *any) {
  struct ur_walker *w = m->w;
  size_t first = c << UR_GRAPH_CHUNK_SHIFT, last = first + ((size_t)1 << UR_GRAPH_CHUNK_SHIFT);
  if (last > w->n) last = w->n;
  for (size_t j = 0; j < last - first; j++) {
    size_t i = down ? last - 1 - j : first + j;
    if (w->marked[i] != 2) continue;
    *any = 1;
    int r = read_dense(m, i);
    if (!r) r = pass_drain(m);
    if (r) return r;
  }
  return 0;
}

static int read_passes(struct marker *m) {
  struct ur_walker *w = m->w;
  size_t nchunks = w->graph.nchunks;
  m->passing = 1;
  for (w->passes = 0;; w->passes++) {
    int any = 0, down = w->passes & 1;
    for (size_t k = 0; k < nchunks; k++) {
      size_t c = down ? nchunks - 1 - k : k;
      if (!w->pending[c]) continue;
      w->pending[c] = 0;
      int r = pass_chunk(m, c, down, &any);
      if (r) return r;
    }
    if (!any) return 0;
    if (w->passes >= nchunks + UR_WALKER_EXTRA_PASSES) return -ERANGE;
  }
}

/* Drain, then take from the pool, until the team has nothing left. */
static int work(struct marker *m) {
  for (;;) {
    int r = m->graph ? graph_drain(m) : drain(m);
    if (r) return r;
    if (!m->pool) return 0;
    if ((r = reserve_todo(m, SHARE_MAX)) != 0) return r;
    m->todo_len = ur_work_pool_take(m->pool, m->todo, SHARE_MAX);
    if (!m->todo_len) return 0;
  }
}

/* The first marker scans the roots; the others start with nothing and are
 * given work as its stack grows. */
static int mark_roots(struct marker *m, const uint64_t *ranges, size_t nranges,
                      const uint64_t *values, size_t nvalues) {
  ur_hit_fn hit = !m->graph ? mark_hit : m->w->graph.dense ? partial_hit : graph_hit;
  for (size_t i = 0; i < nranges; i++) {
    int r = scan_range(m->w, m->mem, &m->bytes_scanned, ranges[2 * i], ranges[2 * i + 1], hit, m);
    if (!r) r = m->graph ? graph_drain(m) : drain(m);
    if (r) return r;
  }
  for (size_t i = 0; i < nvalues; i++) {
    ssize_t idx = ur_walker_find(m->w, values[i]);
    if (idx >= 0) {
      int r = hit(m, (size_t)idx);
      if (r) return r;
    }
  }
  return work(m);
}

struct helper_job {
  struct marker m;
  int rc;
};

static void helper_main(void *arg) {
  struct helper_job *job = arg;
  job->rc = work(&job->m);
  if (job->rc) ur_work_pool_fail(job->m.pool);
}

int ur_walker_mark(struct ur_walker *w, const uint64_t *ranges, size_t nranges,
                   const uint64_t *values, size_t nvalues) {
  return ur_walker_mark_team(w, &w->mem, 1, NULL, ranges, nranges, values, nvalues);
}

int ur_walker_mark_team(struct ur_walker *w, struct ur_mem *const *mems, unsigned n,
                        const struct ur_team_ops *ops, const uint64_t *ranges, size_t nranges,
                        const uint64_t *values, size_t nvalues) {
  w->marked_by = 1;
  if (!w->n) return 0;
  int graph = 0;
  if (w->max_edges) {
    /* A heap denser in pointers than the budget is marked by walking, as
     * is one whose graph finds no memory (the walk needs less). */
    w->has_graph = 0;
    int rc = ur_ref_graph_build(&w->graph, &w->index, mems, n, ops, w->max_edges, w->partial_graph,
                                &w->bytes_scanned, &w->marked_by);
    if (rc != 0 && rc != -E2BIG && rc != -ENOMEM) return rc;
    graph = w->has_graph = rc == 0;
    ur_big_free(w->pending);
    w->pending = NULL;
    w->passes = 0;
    if (graph && w->graph.dense && !(w->pending = ur_big_calloc(w->graph.nchunks + 1, 1)))
      return -ENOMEM;
  }
  if (n > UR_WALKER_MAX_TEAM) n = UR_WALKER_MAX_TEAM;
  if (!ops || n < 1) n = 1;
  struct helper_job *jobs = n > 1 ? ur_big_calloc(n - 1, sizeof(*jobs)) : NULL;
  if (!jobs) n = 1;
  struct ur_work_pool pool;
  ur_work_pool_init(&pool, n);
  struct marker lead = {.w = w, .mem = mems[0], .pool = n > 1 ? &pool : NULL, .graph = graph};
  /* Helpers that fail to start never join in: the count is settled before
   * the lead marks anything, so no one can wait for a missing thread. */
  unsigned started = 0;
  for (unsigned k = 1; k < n; k++) {
    struct helper_job *job = &jobs[started];
    job->m = (struct marker){.w = w, .mem = mems[k], .pool = &pool, .graph = graph};
    if (ops->start(ops->ctx, helper_main, job) == 0) started++;
    else ur_work_pool_leave(&pool);
  }
  int rc = mark_roots(&lead, ranges, nranges, values, nvalues);
  if (rc && lead.pool) ur_work_pool_fail(&pool);
  if (started) ops->join(ops->ctx);
  w->bytes_scanned += lead.bytes_scanned;
  ur_big_free(lead.todo);
  for (unsigned k = 0; k < started; k++) {
    w->bytes_scanned += jobs[k].m.bytes_scanned;
    ur_big_free(jobs[k].m.todo);
    if (!rc) rc = jobs[k].rc;
  }
  ur_big_free(jobs);
  w->handed_over += pool.given;
  w->marked_by = 1 + started;
  ur_work_pool_free(&pool);
  if (!rc && w->pending) {
    struct marker solo = {.w = w, .mem = mems[0], .graph = 1};
    rc = read_passes(&solo);
    w->bytes_scanned += solo.bytes_scanned;
    ur_big_free(solo.todo);
  }
  return rc;
}
