/* _native.sweep(): the shared sweep core (native/mark/sweep_core.c) over
 * /proc/PID/mem, with the GIL released for the whole walk.
 *
 * release=SESSION (a target swept in place, "stopped" mode): every chunk the
 * walk can touch (under an allocation or a root range) is read first, the
 * session is released, and the mark and fold run on that copy while the
 * target runs on. The pause is then the copy, not the sweep. When the copy
 * would not fit in the cache the target stays stopped throughout, as before.
 *
 * memory=MemoryCopy (a "copy" snapshot, memory_copy.c): the walk reads the
 * finished copy, which already holds every chunk it may touch. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "cow.h"
#include "heap_walker.h"
#include "memory.h"
#include "native.h"
#include "pthread_team.h"
#include "retention.h"
#include "sweep_core.h"
#include "thread_capture.h"

#define UR_SWEEP_MAX_THREADS UR_PTHREAD_TEAM_MAX

/* Chunks spanned by n ranges, counting a chunk shared by neighbours in the
 * list once: exact for sorted ranges, an overestimate otherwise. Each range
 * is begin[i * stride] to end[i * stride], or, with `sizes`, begin plus
 * max(that, 1) (the registry's (begin, size) pairs). */
static uint64_t chunks_spanned(const uint64_t *begin, const uint64_t *end, size_t stride,
                               size_t n, int sizes) {
  uint64_t chunks = 0, last = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    uint64_t b = begin[i * stride], e = end[i * stride];
    if (sizes) e = b + (e ? e : 1) < b ? UINT64_MAX : b + (e ? e : 1);
    if (e <= b) continue;
    uint64_t first = b >> UR_CHUNK_SHIFT, final = (e - 1) >> UR_CHUNK_SHIFT;
    if (first == last) first++;
    if (final >= first && final != UINT64_MAX) chunks += final - first + 1;
    last = final;
  }
  return chunks;
}

/* A stopped target's copy is made (and the target let go before the
 * mark) only up to this size; past it the target stays stopped for the
 * whole sweep, as LeakSanitizer's check stops it, read through a cache of
 * UR_STOPPED_CACHE: the scan then holds no copy of the heap (at most 64 MB
 * and 48 bytes per allocation, docs/pause.md), and on a machine where fresh
 * memory is slow to touch the sweep in place is not slower than the copy
 * (1 GB of 2.7M blocks: 0.75-0.94 s paused, against a copy of 1.1 GB that
 * paused 0.3-1.6 s and took 0.6-2.0 s in all). */
#define UR_STOPPED_COPY_MAX (UINT64_C(64) << 20)
#define UR_STOPPED_CACHE (UINT64_C(32) << 20)
/* Swept in place, the target stopped, the marking team reads it as the
 * concurrent mark reads a live one: each thread through a cache of its own,
 * UR_STOPPED_CACHE shared among them (the scan holds no more than with one
 * reader), each at least this much. */
#define UR_STOPPED_READER_CACHE (UINT64_C(8) << 20)

/* Enough cache for `chunks` (those under an allocation or a root range):
 * sized so, nothing is ever evicted and re-read (a random-order list over a
 * 1 GiB heap would otherwise reload a 1 MiB chunk per block), bounded by half
 * the available memory and by the scanner's budget (ur_mem_set_budget). */
static uint64_t cache_bytes_for(uint64_t chunks) {
  chunks += 64; /* headroom: the walker batches only while 32 chunks are free */
  uint64_t cap = ur_mem_cache_bound();
  uint64_t bytes = chunks > (cap >> UR_CHUNK_SHIFT) ? cap : chunks << UR_CHUNK_SHIFT;
  uint64_t least = cap < (UINT64_C(64) << 20) ? cap : UINT64_C(64) << 20;
  return bytes < least ? least : bytes;
}

/* A mark that reads through a cache smaller than what it touches (a target
 * swept stopped in place: UR_STOPPED_CACHE) takes the reference graph
 * whenever it can: the graph's pass reads memory once, in address order,
 * where a walk loads a 1 MiB chunk for nearly every block it reaches in the
 * heap's own order. A server's caches (hash buckets, tree and list nodes,
 * the strings they hold, made in the order of the requests) hold more
 * pointers than the default budget of UR_GRAPH_EDGES_PER_ALLOC a block
 * (PowerDNS's query and packet caches about 4): the budget is then
 * GRAPH_EDGES_BOUNDED a block, the graph's 28 bytes a block still within
 * the scanner's memory per allocation (docs/pause.md), and the graph is
 * partial: a heap denser still keeps that many and has the blocks past it
 * read again in passes in address order (heap_walker.c), never walked. */
#define GRAPH_EDGES_BOUNDED 6
/* Whatever the heap's order, a reader loads at most this many times what
 * the mark touches (and 64 chunks more): past it a view fails and the sweep
 * ends (-ERANGE), rather than hold a stopped target while the cache evicts
 * what the mark comes back to. The graph's pass reads each chunk about
 * once; a walk over a cache holding everything reads each once. */
#define READ_BUDGET_TIMES 4
#define UR_STRINGIFY(x) #x
#define UR_STR(x) UR_STRINGIFY(x)

static uint64_t read_budget(uint64_t touched) {
  return (touched + 64) * READ_BUDGET_TIMES << UR_CHUNK_SHIFT;
}

/* The graph's budget and the reader's for a mark over mem that touches
 * `touched` chunks. */
static void bound_reads(struct ur_walker *w, struct ur_pread_mem *mem, uint64_t touched) {
  mem->read_budget = read_budget(touched);
  uint64_t bounded = GRAPH_EDGES_BOUNDED * (uint64_t)w->n + UR_GRAPH_EDGES_FIXED;
  if (mem->max_chunks < touched && w->max_edges && w->max_edges < bounded) {
    w->max_edges = bounded;
    w->partial_graph = 1;
  }
}

/* Buffers from Python may be unaligned (memoryview slices): copy those. */
static const uint64_t *aligned_words(Py_buffer *b, uint64_t **owned) {
  *owned = NULL;
  if (((uintptr_t)b->buf & 7) == 0) return b->buf;
  *owned = malloc(b->len ? (size_t)b->len : 1);
  if (*owned) memcpy(*owned, b->buf, (size_t)b->len);
  return *owned;
}

static uint64_t now_ns(void) { return ur_now_ns(); }

/* The mark's own arrays, in bytes (the scanner's memory per allocation,
 * docs/pause.md): the walker's, the allocation index's, the graph's. */
static void held_bytes(const struct ur_walker *w, size_t nallocs, uint64_t out[3]) {
  out[0] = nallocs + (w->own ? 16 * (uint64_t)w->n : 0) + (w->orig ? 4 * (uint64_t)nallocs : 0);
  const struct ur_alloc_index *ix = &w->index;
  out[1] = ur_run_index_bytes(&ix->runs) +
           (ix->pages.slots ? (ix->pages.mask + 1) * sizeof(struct ur_page_entry) : 0) +
           (ix->buckets ? (ix->bucket_mask + 1) * sizeof(struct ur_bucket) : 0);
  const struct ur_ref_graph *g = &w->graph;
  out[2] = w->has_graph ? 4 * (uint64_t)g->n + 5 * (uint64_t)g->nchunks + 4 * g->edges : 0;
  if (w->has_graph && g->dense) out[2] += g->n / 8 + 1 + g->nchunks + 1; /* dense bits, pending */
}

/* Threads that read a stopped target's memory: the copy is the pause, and
 * /proc/PID/mem reads are CPU-bound per thread. The CPUs we may use, <= 4. */
static unsigned copy_threads(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  int n = CPU_COUNT(&set);
  return n < 1 ? 1 : n > 4 ? 4 : (unsigned)n;
}

/* Read every chunk under an allocation (unsorted (begin, size) pairs) or a
 * root range, then let the target go: the walker's index is built after, on
 * the scanner's time. Returns 1 if it was released, 0 if the copy did not
 * fit (the target stays stopped and the reader loads on demand). */
static int copy_then_release(struct ur_pread_mem *mem, const uint64_t *allocs, size_t nallocs,
                             const uint64_t *roots, size_t nroots, void *session) {
  /* session NULL: memory that does not change anyway (a frozen snapshot
   * child): copied so that a team can mark it, nothing to release. */
  size_t from = mem->used_chunks;
  int rc = ur_mem_reserve(mem, roots, nroots);
  uint64_t held = UINT64_MAX; /* the chunk the last block ended in: reserved */
  for (size_t i = 0; rc == 0 && i < nallocs; i++) {
    uint64_t b = allocs[2 * i], s = allocs[2 * i + 1] ? allocs[2 * i + 1] : 1;
    uint64_t r[2] = {b, b + s < b ? UINT64_MAX : b + s};
    /* Most blocks share their chunk with the one before (the registry
     * comes in address order): no lookup for those. */
    uint64_t first = b >> UR_CHUNK_SHIFT, final = (r[1] - 1) >> UR_CHUNK_SHIFT;
    if (first == held && final == held) continue;
    rc = ur_mem_reserve(mem, r, 1);
    held = final;
  }
  /* What was reserved is read even when not everything fit: a slot in the
   * table must hold its bytes before anyone views it. */
  ur_mem_fill(mem, from, copy_threads());
  if (rc != 0) return 0;
  ur_mem_freeze(mem);
  if (session) ur_session_release_nogil(session);
  return 1;
}

/* layout: (begin, end, demand_zero) per readable mapping of the process,
 * sorted. Without it (or memory for it) every page is read, as before. */
static void set_layout(struct ur_pread_mem *mem, const uint64_t *layout, size_t n) {
  uint64_t *readable = malloc((n ? n : 1) * 2 * sizeof(uint64_t));
  uint64_t *zero = malloc((n ? n : 1) * 2 * sizeof(uint64_t));
  size_t nr = 0, nz = 0;
  for (size_t i = 0; readable && zero && i < n; i++) {
    const uint64_t *t = layout + 3 * i;
    readable[2 * nr] = t[0];
    readable[2 * nr++ + 1] = t[1];
    if (t[2]) {
      zero[2 * nz] = t[0];
      zero[2 * nz++ + 1] = t[1];
    }
  }
  if (readable && zero) ur_mem_set_layout(mem, readable, nr, zero, nz);
  free(readable);
  free(zero);
}

/* Readers 1..threads-1 of a live process, each with a cache of its own
 * (readers[0] is the caller's): how many there are with the caller's, at
 * least 1. */
static unsigned open_readers(struct ur_pread_mem *readers, unsigned threads, int pid,
                             uint64_t cache_bytes, const uint64_t *layout, size_t nlayout) {
  unsigned n = 1;
  for (; n < threads; n++) {
    if (ur_mem_open(&readers[n], pid, cache_bytes) != 0) break;
    if (layout) set_layout(&readers[n], layout, nlayout);
  }
  return n;
}

/* Graph mode (_native.sweep(graph=...)): the mark's reference graph and the
 * root words that hit the heap, asked who holds one block (why=ADDRESS)
 * and for the dominator tree (dominators=True) while the memory the walk
 * read is still open (retention.h). */
struct graph_query {
  int on;
  const uint64_t *regions; /* (begin, end, id) triples, sorted */
  size_t nregions;
  const uint32_t *value_regions; /* one per root value */
  uint32_t default_region, nregion_ids;
  int has_why, dominators;
  uint64_t why;
};

struct graph_answer {
  int rc;
  struct ur_root_hit *hits;
  size_t nhits;
  /* why */
  int64_t block;   /* sorted index of the block holding the address, or -1 */
  int reachable;   /* a root reaches it (else: a leak, chained from a leak's root) */
  int found;       /* a chain was found */
  size_t hit;      /* reachable: the root hit the chain starts at */
  uint32_t *path;  /* sorted indices, first to last */
  size_t len;
  int64_t *offsets; /* per step from the second: offset of the pointer in the block before */
  uint64_t *values;
  uint32_t referrers[16];
  size_t nreferrers;
  /* dominators, per sorted block and per region */
  int64_t *idom;
  uint64_t *retained, *retained_count, *region_bytes, *region_count;
  struct ur_retention_groups groups; /* by root and site (stack id, or -(size + 1)) */
};

#define GRAPH_EDGES_PER_ALLOC 64

static void graph_answer_free(struct graph_answer *a) {
  ur_big_free(a->hits);
  ur_big_free(a->path);
  ur_big_free(a->offsets);
  ur_big_free(a->values);
  ur_big_free(a->idom);
  ur_big_free(a->retained);
  ur_big_free(a->retained_count);
  ur_big_free(a->region_bytes);
  ur_big_free(a->region_count);
  ur_retention_groups_free(&a->groups);
}

static int graph_why(struct ur_walker *w, const struct graph_query *q,
                     const struct ur_sweep_out *res, struct graph_answer *a) {
  a->block = ur_walker_find(w, q->why);
  if (a->block < 0) return 0;
  uint32_t target = (uint32_t)a->block;
  size_t nsources = a->nhits;
  uint32_t *sources = ur_big_calloc(nsources ? nsources : 1, sizeof(*sources));
  if (!sources) return -ENOMEM;
  for (size_t k = 0; k < a->nhits; k++) sources[k] = a->hits[k].block;
  size_t source = 0;
  int rc = ur_retention_path(w, sources, nsources, target, &a->path, &a->len, &source);
  ur_big_free(sources);
  if (rc < 0) return rc;
  a->reachable = rc == 1;
  a->hit = source;
  if (!a->reachable) {
    /* A leak: the chain starts at a leak the fold reports. */
    sources = ur_big_calloc(res->nleaks ? res->nleaks : 1, sizeof(*sources));
    if (!sources) return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < res->nleaks; i++) {
      ssize_t b = ur_walker_find(w, res->leaks[i].begin);
      if (b >= 0) sources[k++] = (uint32_t)b;
    }
    rc = ur_retention_path(w, sources, k, target, &a->path, &a->len, &source);
    ur_big_free(sources);
    if (rc < 0) return rc;
    /* Every block that points at it, up to the first 16. */
    for (size_t b = 0; b < w->n && a->nreferrers < 16; b++) {
      size_t count;
      const uint32_t *to = ur_ref_graph_edges(&w->graph, b, &count);
      for (size_t e = 0; e < count; e++)
        if (to[e] == target) {
          a->referrers[a->nreferrers++] = (uint32_t)b;
          break;
        }
    }
  }
  a->found = rc == 1;
  if (!a->found) return 0;
  a->offsets = ur_big_calloc(a->len, sizeof(*a->offsets));
  a->values = ur_big_calloc(a->len, sizeof(*a->values));
  if (!a->offsets || !a->values) return -ENOMEM;
  a->offsets[0] = -1;
  for (size_t j = 1; j < a->len; j++)
    a->offsets[j] = ur_retention_edge(w, a->path[j - 1], a->path[j], &a->values[j]);
  return 0;
}

/* The sites of the tree's blocks: a block's stack id, or without one
 * (backtraces off) its size, as -(size + 1). */
static int group_sites(const struct ur_walker *w, const uint32_t *ids, struct graph_answer *a) {
  int64_t *keys = ur_big_calloc(w->n ? w->n : 1, sizeof(*keys));
  if (!keys) return -ENOMEM;
  for (size_t i = 0; i < w->n; i++) {
    uint32_t id = ids ? ids[ur_walker_orig(w, i)] : 0;
    keys[i] = id ? (int64_t)id : -1 - (int64_t)ur_walker_size(w, i);
  }
  int rc = ur_retention_group(w, a->idom, a->retained, a->retained_count, keys, &a->groups);
  ur_big_free(keys);
  return rc;
}

static void graph_run(struct ur_walker *w, const uint64_t *ranges, size_t nranges,
                      const uint64_t *values, size_t nvalues, const uint32_t *ids,
                      const struct graph_query *q, const struct ur_sweep_out *res,
                      struct graph_answer *a) {
  if ((!w->has_graph || w->graph.dense) && w->n) {
    a->rc = -E2BIG;
    return;
  }
  a->rc = ur_retention_hits(w, ranges, nranges, values, nvalues, q->regions, q->nregions,
                            q->value_regions, q->default_region, &a->hits, &a->nhits);
  if (a->rc == 0 && q->has_why) a->rc = graph_why(w, q, res, a);
  if (a->rc == 0 && q->dominators) {
    size_t n = w->n ? w->n : 1, r = q->nregion_ids ? q->nregion_ids : 1;
    a->idom = ur_big_calloc(n, sizeof(*a->idom));
    a->retained = ur_big_calloc(n, sizeof(*a->retained));
    a->retained_count = ur_big_calloc(n, sizeof(*a->retained_count));
    a->region_bytes = ur_big_calloc(r, sizeof(*a->region_bytes));
    a->region_count = ur_big_calloc(r, sizeof(*a->region_count));
    if (!a->idom || !a->retained || !a->retained_count || !a->region_bytes || !a->region_count)
      a->rc = -ENOMEM;
    else if (w->n)
      a->rc = ur_retention_dominators(w, a->hits, a->nhits, q->nregion_ids, a->idom,
                                      a->retained, a->retained_count, a->region_bytes,
                                      a->region_count);
    if (a->rc == 0) a->rc = group_sites(w, ids, a);
  }
}

/* The answer in the caller's indices (allocs order). */
static PyObject *graph_result(const struct ur_walker *w, const struct graph_query *q,
                              const struct graph_answer *a) {
  PyObject *out = PyDict_New();
  if (!out) return NULL;
  PyObject *hits = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(a->nhits * sizeof(*a->hits)));
  if (!hits) goto fail;
  {
    struct ur_root_hit *h = (struct ur_root_hit *)PyBytes_AS_STRING(hits);
    for (size_t k = 0; k < a->nhits; k++) {
      h[k] = a->hits[k];
      h[k].block = ur_walker_orig(w, a->hits[k].block);
    }
  }
  int bad = PyDict_SetItemString(out, "hits", hits);
  Py_DECREF(hits);
  if (bad) goto fail;
  if (q->has_why) {
    PyObject *path = PyList_New((Py_ssize_t)(a->found ? a->len : 0));
    PyObject *refs = PyList_New((Py_ssize_t)a->nreferrers);
    if (!path || !refs) {
      Py_XDECREF(path);
      Py_XDECREF(refs);
      goto fail;
    }
    for (size_t j = 0; a->found && j < a->len; j++)
      PyList_SET_ITEM(path, (Py_ssize_t)j,
                      Py_BuildValue("(ILK)", ur_walker_orig(w, a->path[j]), (long long)a->offsets[j],
                                    (unsigned long long)a->values[j]));
    for (size_t j = 0; j < a->nreferrers; j++)
      PyList_SET_ITEM(refs, (Py_ssize_t)j, PyLong_FromUnsignedLong(ur_walker_orig(w, a->referrers[j])));
    PyObject *why = Py_BuildValue(
        "{s:L,s:O,s:N,s:N,s:n}", "block",
        a->block < 0 ? -1LL : (long long)ur_walker_orig(w, (size_t)a->block), "reachable",
        a->reachable ? Py_True : Py_False, "path", path, "referrers", refs, "hit",
        a->reachable && a->found ? (Py_ssize_t)a->hit : (Py_ssize_t)-1);
    if (!why || PyDict_SetItemString(out, "why", why)) {
      Py_XDECREF(why);
      goto fail;
    }
    Py_DECREF(why);
  }
  if (q->dominators) {
    const struct ur_retention_groups *g = &a->groups;
    PyObject *dom = Py_BuildValue(
        "{s:y#,s:y#,s:y#,s:y#,s:y#}", "region_bytes", (const char *)a->region_bytes,
        (Py_ssize_t)(q->nregion_ids * 8), "region_count", (const char *)a->region_count,
        (Py_ssize_t)(q->nregion_ids * 8), "root_sites",
        g->root_sites ? (const char *)g->root_sites : "",
        (Py_ssize_t)(g->nroot_sites * sizeof(*g->root_sites)), "sites",
        g->sites ? (const char *)g->sites : "", (Py_ssize_t)(g->nsites * sizeof(*g->sites)),
        "holders", g->holders ? (const char *)g->holders : "",
        (Py_ssize_t)(g->nholders * sizeof(*g->holders)));
    if (!dom || PyDict_SetItemString(out, "dominators", dom)) {
      Py_XDECREF(dom);
      goto fail;
    }
    Py_DECREF(dom);
  }
  return out;
fail:
  Py_DECREF(out);
  return NULL;
}

PyObject *ur_py_sweep(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"memory",   "allocs",  "root_ranges", "root_values", "stack_ids",
                           "excluded", "cache_mb", "release",    "threads",     "layout",
                           "frozen",   "regions", "value_regions", "default_region",
                           "region_ids", "why",   "dominators", "live", "usable", NULL};
  PyObject *source;
  int pid = -1;
  unsigned long long cache_mb = 0;
  unsigned threads = 1;
  int frozen = 0, live = 0, usable = 0;
  PyObject *release_obj = NULL;
  Py_buffer ab, rb, vb, sb = {0}, eb = {0}, zb = {0}, gb = {0}, gvb = {0};
  struct graph_query gq = {0};
  PyObject *why_obj = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Oy*y*y*|$y*y*KOIy*py*y*IIOppp", kwlist, &source,
                                   &ab, &rb, &vb, &sb, &eb, &cache_mb, &release_obj, &threads,
                                   &zb, &frozen, &gb, &gvb, &gq.default_region, &gq.nregion_ids,
                                   &why_obj, &gq.dominators, &live, &usable))
    return NULL;
  gq.on = gb.buf != NULL;
  if (why_obj && why_obj != Py_None) {
    gq.has_why = 1;
    gq.why = PyLong_AsUnsignedLongLong(why_obj);
  }
  if (threads < 1) threads = 1;
  if (threads > UR_SWEEP_MAX_THREADS) threads = UR_SWEEP_MAX_THREADS;
  void *release = NULL;
  struct ur_pread_mem *copy = ur_memory_copy_mem(source);
  /* A copy-on-write snapshot: the live process, its saved pages laid over
   * every read, by readers with small caches of their own. */
  struct ur_cow *cow = copy ? NULL : ur_memory_copy_cow(source, &pid);
  if (cow) {
    live = 1;
    frozen = 0;
    if (!cache_mb) cache_mb = 8;
  }
  if (!copy && !cow && PyLong_Check(source)) pid = (int)PyLong_AsLong(source);
  if ((!copy && pid <= 0) ||
      (release_obj && release_obj != Py_None && !(release = ur_session_to_release(release_obj)))) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "memory must be a pid or a finished MemoryCopy");
    PyBuffer_Release(&ab);
    PyBuffer_Release(&rb);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&zb);
    PyBuffer_Release(&gb);
    PyBuffer_Release(&gvb);
    return NULL;
  }
  PyObject *result = NULL;
  uint64_t *own_a = NULL, *own_r = NULL, *own_v = NULL, *own_s = NULL, *own_e = NULL;
  uint64_t *own_z = NULL, *own_g = NULL, *own_gv = NULL;
  struct graph_answer ga = {0};
  size_t nallocs = (size_t)ab.len / 16;
  if (PyErr_Occurred()) goto out; /* why= not an address */
  if (gq.on && (gb.len % 24 || (size_t)gvb.len != (size_t)vb.len / 2)) {
    PyErr_SetString(PyExc_ValueError,
                    "regions must be packed u64 triples, value_regions one u32 per root value");
    goto out;
  }
  if (ab.len % 16 || rb.len % 16 || vb.len % 8 || eb.len % 8 || zb.len % 24 ||
      (sb.buf && sb.len && (size_t)sb.len != nallocs * 4)) {
    PyErr_SetString(PyExc_ValueError,
                    "allocs and root_ranges must be packed u64 pairs, layout u64 triples, "
                    "root_values and excluded packed u64, stack_ids one packed u32 per "
                    "allocation");
    goto out;
  }
  if (nallocs > UR_WALKER_MAX_ALLOCS) {
    PyErr_SetString(PyExc_ValueError, "too many allocations");
    goto out;
  }
  const uint64_t *allocs = aligned_words(&ab, &own_a);
  const uint64_t *ranges = aligned_words(&rb, &own_r);
  const uint64_t *values = aligned_words(&vb, &own_v);
  const uint64_t *excluded = eb.buf ? aligned_words(&eb, &own_e) : NULL;
  const uint32_t *ids = sb.buf && sb.len ? (const uint32_t *)aligned_words(&sb, &own_s) : NULL;
  const uint64_t *zeros = zb.buf && zb.len ? aligned_words(&zb, &own_z) : NULL;
  if (gq.on) {
    gq.regions = gb.len ? aligned_words(&gb, &own_g) : NULL;
    gq.nregions = (size_t)gb.len / 24;
    gq.value_regions = gvb.len ? (const uint32_t *)aligned_words(&gvb, &own_gv) : NULL;
  }
  if (!allocs || !ranges || !values || (eb.buf && !excluded) || (sb.buf && sb.len && !ids) ||
      (zb.buf && zb.len && !zeros) || (gq.on && gb.len && !gq.regions) ||
      (gq.on && gvb.len && !gq.value_regions)) {
    PyErr_NoMemory();
    goto out;
  }
  struct ur_pread_mem own, *mem = copy ? copy : &own;
  struct ur_walker w = {0};
  struct ur_sweep_out res = {0};
  struct ur_sweep_in in = {
      .ranges = ranges,
      .nranges = (size_t)rb.len / 16,
      .values = values,
      .nvalues = (size_t)vb.len / 8,
      .excluded = excluded,
      .nexcluded = excluded ? (size_t)eb.len / 8 : 0,
      .stack_ids = ids,
  };
  int rc = 0, opened = copy != NULL, released = 0;
  unsigned in_place = 0; /* swept stopped, in place: readers for the team */
  if (copy) copy->mem.pages_skipped = 0;
  uint64_t root_chunks = chunks_spanned(ranges, ranges + 1, 2, in.nranges, 0);
  struct ur_frozen_view views[UR_SWEEP_MAX_THREADS];
  struct ur_pread_mem readers[UR_SWEEP_MAX_THREADS];
  unsigned nreaders = 1;
  struct ur_mem *mems[UR_SWEEP_MAX_THREADS];
  /* The marking team's extra threads, over a frozen cache. */
  struct ur_pthread_team team = {.n = 0};
  const struct ur_team_ops ops = {ur_pthread_team_start, ur_pthread_team_join, &team};
  unsigned team_size = 1;
  Py_BEGIN_ALLOW_THREADS
  if ((release || frozen) && !copy) {
    /* The copy first (the cache sized from the unsorted list: an
     * overestimate, bounded like any), the index once the target runs. */
    uint64_t chunks = chunks_spanned(allocs, allocs + 1, 2, nallocs, 1);
    uint64_t cache = cache_mb ? cache_mb << 20 : cache_bytes_for(chunks + root_chunks);
    if (!cache_mb && release && ((chunks + root_chunks) << UR_CHUNK_SHIFT) > UR_STOPPED_COPY_MAX) {
      in_place = threads < UR_STOPPED_CACHE / UR_STOPPED_READER_CACHE
                     ? threads
                     : (unsigned)(UR_STOPPED_CACHE / UR_STOPPED_READER_CACHE);
      cache = UR_STOPPED_CACHE / in_place;
    }
    rc = ur_mem_open(mem, pid, cache);
    opened = rc == 0;
    if (rc == 0 && zeros) set_layout(mem, zeros, (size_t)zb.len / 24); /* else: read all */
    if (rc == 0)
      released = copy_then_release(mem, allocs, nallocs, ranges, in.nranges, release) && release;
    if (rc == 0 && release && !released) ur_mem_skip_absent(mem); /* swept stopped, in place */
    if (released) in_place = 0;
  }
  /* The walker only keeps the reader's address until marking starts. */
  if (rc == 0) rc = ur_walker_init(&w, &mem->mem, allocs, nallocs,
                                     usable ? UR_SIZES_USABLE : UR_SIZES_REQUESTED);
  /* The graph is what graph mode is for: a far larger budget than the
   * mark's own, still address space until edges are written. */
  if (rc == 0 && gq.on) w.max_edges = GRAPH_EDGES_PER_ALLOC * (uint64_t)w.n + UR_GRAPH_EDGES_FIXED;
  if (rc == 0 && !opened) {
    uint64_t chunks = chunks_spanned(w.pairs, w.pairs + 1, 2, w.n, 1) + root_chunks;
    rc = ur_mem_open(mem, pid, cache_mb ? cache_mb << 20 : cache_bytes_for(chunks));
    opened = rc == 0;
    if (rc == 0 && zeros) set_layout(mem, zeros, (size_t)zb.len / 24);
    if (rc == 0) mem->cow = cow;
    /* Live (a copy-on-write snapshot, the concurrent mark): a page the
     * process lacks now is zero, and a page written after this read is
     * the snapshot's saved page or a round's written page. Reading it
     * through /proc would map the zero page into the target. */
    if (rc == 0 && live) ur_mem_skip_absent(mem);
  }
  uint64_t touched = rc == 0 ? chunks_spanned(w.pairs, w.pairs + 1, 2, w.n, 1) + root_chunks : 0;
  if (rc == 0 && !copy) bound_reads(&w, mem, touched);
  /* Several marking threads only over a frozen cache: each reads it through
   * a view of its own, and nothing is loaded any more. */
  team_size = rc == 0 && mem->frozen ? threads : 1;
  if (rc == 0 && (live || in_place > 1) && !copy && !mem->frozen && threads > 1) {
    /* live=True (a process that runs on: the concurrent mark), or a stopped
     * target swept in place: each marking thread reads through a chunk
     * cache of its own, as large as the first. */
    nreaders = open_readers(readers, live ? threads : in_place, pid,
                            (uint64_t)mem->max_chunks << UR_CHUNK_SHIFT, zeros,
                            (size_t)zb.len / 24);
    for (unsigned k = 1; k < nreaders; k++) {
      readers[k].cow = cow;
      readers[k].read_budget = read_budget(touched);
      ur_mem_skip_absent(&readers[k]);
    }
    team_size = nreaders;
    mems[0] = &mem->mem;
    for (unsigned k = 1; k < nreaders; k++) mems[k] = &readers[k].mem;
    in.threads = team_size;
    in.mems = mems;
    in.team = &ops;
  } else if (team_size > 1) {
    mems[0] = &mem->mem;
    for (unsigned k = 1; k < team_size; k++) {
      ur_frozen_view_init(&views[k], mem);
      mems[k] = &views[k].mem;
    }
    in.threads = team_size;
    in.mems = mems;
    in.team = &ops;
  }
  if (rc == 0) rc = ur_sweep_run(&w, &in, 1, now_ns, &res);
  /* Readers with caches of their own each count the bad pages they meet:
   * one met by two (where their shares meet) counts twice. */
  for (unsigned k = 1; k < nreaders; k++) {
    mem->mem.pages_skipped += readers[k].mem.pages_skipped;
    mem->bytes_loaded += readers[k].bytes_loaded;
    mem->bytes_vm_read += readers[k].bytes_vm_read;
  }
  if (nreaders == 1)
    for (unsigned k = 1; k < team_size; k++) mem->mem.pages_skipped += views[k].mem.pages_skipped;
  if (rc == -ENOMEM && mem->frozen_miss) rc = -EFAULT; /* a bug: reported as such, not as OOM */
  for (unsigned k = 0; k < nreaders; k++)
    if (rc == -ENOMEM && (k ? readers[k].over_budget : mem->over_budget)) rc = -ERANGE;
  if (rc == 0 && gq.on) graph_run(&w, ranges, in.nranges, values, in.nvalues, ids, &gq, &res, &ga);
  Py_END_ALLOW_THREADS
  if (rc == 0 && gq.on && ga.rc) {
    ur_py_raise(ga.rc, ga.rc == -E2BIG ? "the heap's reference graph has too many edges to keep"
                                       : "the heap's reference graph does not fit in memory");
  } else if (rc == 0) {
    uint64_t held[3];
    held_bytes(&w, nallocs, held);
    result = Py_BuildValue(
        "{s:y#,s:y#,s:K,s:K,s:K,s:K,s:K,s:K,s:n,s:K,s:K,s:n,s:K,s:O,s:I,s:I,s:K,s:K,s:K}", "unreachable",
        res.unreachable ? (const char *)res.unreachable : "", (Py_ssize_t)(res.nunreachable * 4),
        "leaks", res.leaks ? (const char *)res.leaks : "",
        (Py_ssize_t)(res.nleaks * sizeof(*res.leaks)), "unreachable_count",
        (unsigned long long)res.unreachable_count, "unreachable_bytes",
        (unsigned long long)res.unreachable_bytes, "bytes_scanned",
        (unsigned long long)res.bytes_scanned, "pages_skipped",
        (unsigned long long)mem->mem.pages_skipped, "mark_ns", (unsigned long long)res.mark_ns,
        "fold_ns", (unsigned long long)res.fold_ns, "overlapping", (Py_ssize_t)w.overlapping,
        "bytes_read", (unsigned long long)mem->bytes_loaded, "bytes_vm_read",
        (unsigned long long)mem->bytes_vm_read, "allocation_count",
        (Py_ssize_t)w.distinct, "allocation_bytes", (unsigned long long)w.distinct_bytes,
        "released_early", released ? Py_True : Py_False, "mark_threads", w.marked_by,
        "mark_passes", w.passes,
        "walker_bytes", (unsigned long long)held[0], "index_bytes", (unsigned long long)held[1],
        "graph_bytes", (unsigned long long)held[2]);
    PyObject *graph = result && gq.on ? graph_result(&w, &gq, &ga) : NULL;
    if (result && gq.on && (!graph || PyDict_SetItemString(result, "graph", graph))) Py_CLEAR(result);
    Py_XDECREF(graph);
  } else if (rc == -ERANGE) {
    ur_py_raise(rc, "the mark would read the heap's memory more than " UR_STR(READ_BUDGET_TIMES) " times over");
  } else if (!opened && rc != -ENOMEM) {
    ur_py_raise(rc, rc == -ESRCH ? "no such process" : "cannot open the process's memory");
  } else {
    ur_py_raise(rc, "sweep failed");
  }
  for (unsigned k = 1; k < nreaders; k++) ur_mem_close(&readers[k]);
  graph_answer_free(&ga);
  ur_sweep_out_free(&res);
  ur_walker_free(&w);
  if (opened && !copy) ur_mem_close(mem);
out:
  free(own_a);
  free(own_r);
  free(own_v);
  free(own_s);
  free(own_e);
  free(own_z);
  free(own_g);
  free(own_gv);
  PyBuffer_Release(&ab);
  PyBuffer_Release(&rb);
  PyBuffer_Release(&vb);
  if (sb.buf) PyBuffer_Release(&sb);
  if (eb.buf) PyBuffer_Release(&eb);
  if (zb.buf) PyBuffer_Release(&zb);
  if (gb.buf) PyBuffer_Release(&gb);
  if (gvb.buf) PyBuffer_Release(&gvb);
  return result;
}
