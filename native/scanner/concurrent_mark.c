/*
 * The "concurrent" snapshot's re-mark (capture/concurrent.py, docs/pause.md
 * "The concurrent mark"). The first mark runs over the live, running
 * target; what it leaves unmarked are candidates. Their bytes are kept in a
 * store (read once after that mark, then updated from every set of pages the
 * target wrote since). These functions find the written pages, and rescue
 * the candidates that words of written pages, registers and rescued
 * candidates point into.
 *
 * Candidates: sorted (begin, size) pairs, one state byte each:
 *   0 candidate: its words are not roots (kept in the store only);
 *   1 rescued: reachable after all, its store scanned once;
 *   2 gone: no longer the same block (freed or reallocated): its words are
 *     roots, never reported;
 *   3 gone, its store not yet scanned (set by the caller; becomes 2).
 *
 * A word of a written page outside the candidates is a root only if, at the
 * last stop, its address lies in a root range (a stack above its SP,
 * globals, ...) or in a block: a stale pointer in a freed chunk or in a
 * stack's dead frames keeps nothing, as in every other mode. Until that stop
 * is known such a word is pending: (address, candidate) pairs, sorted by
 * address, replaced when its page is read again (resolve() settles them).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include "unreachable/linux_compat.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "memory.h"
#include "native.h"
#include "range_list.h"
#include "sorted_blocks.h"

#define WORD 8u
#define VEC 512
/* The most of the target's memory one walk covers: the walk holds its mmap
 * lock, and a thread of it that maps, unmaps or changes protections waits
 * for the lock meanwhile (as in the shim's helper, write_tracking.c). */
#define WALK_CHUNK ((uint64_t)8 << 20)

enum { CAND = 0, RESCUED = 1, GONE = 2, GONE_PENDING = 3 };

/* Pages a run of the target's memory holds that it wrote since they were
 * last protected, or that nothing protects (mappings born since, untracked
 * ones). clear: protect again the written ones (PM_SCAN_WP_MATCHING), so
 * that the next call lists only what is written after this one. */
static int written_runs(int pm, uint64_t begin, uint64_t end, int clear, uint64_t required,
                        uint64_t **out, size_t *n, size_t *cap) {
  struct page_region vec[VEC];
  uint64_t pos = begin;
  while (pos < end) {
    /* Inverted WPALLOWED: a page matches when it is written or untracked;
     * absent ones are dropped below (they hold zeros). `required` keeps the
     * protecting walk to present pages: given a hole, the kernel protects
     * all of it, a marker in each page (page tables for all of a sparse
     * reservation, and a marker reads as swapped). */
    struct pm_scan_arg a = {
        .size = sizeof(a),
        .flags = clear ? PM_SCAN_WP_MATCHING : 0,
        .start = pos,
        .end = end - pos > WALK_CHUNK ? pos + WALK_CHUNK : end,
        .vec = (uint64_t)(uintptr_t)vec,
        .vec_len = VEC,
        .category_inverted = PAGE_IS_WPALLOWED,
        .category_mask = required,
        .category_anyof_mask = PAGE_IS_WPALLOWED | PAGE_IS_WRITTEN,
        .return_mask = PAGE_IS_WPALLOWED | PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
    };
    long r = ioctl(pm, PAGEMAP_SCAN, &a);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    for (long i = 0; i < r; i++) {
      uint64_t c = vec[i].categories;
      if (!(c & (PAGE_IS_PRESENT | PAGE_IS_SWAPPED))) continue;
      if (ur_ranges_push(out, n, cap, vec[i].start, vec[i].end) < 0) return -ENOMEM;
    }
    uint64_t walked = a.walk_end > end ? end : a.walk_end;
    if (walked <= pos) return -EIO;
    pos = walked;
  }
  return 0;
}

/* One walker's share of written_pages: its own pagemap descriptor and runs. */
struct written_job {
  const char *path;
  const uint64_t *r; /* (begin, end) ranges */
  size_t nr;
  int clear;
  uint64_t *out;
  size_t n, cap;
  int rc;
};

static void *written_job_run(void *arg) {
  struct written_job *j = arg;
  int pm = open(j->path, O_RDONLY | O_CLOEXEC);
  if (pm < 0) {
    j->rc = -errno;
    return NULL;
  }
  for (size_t i = 0; i < j->nr && j->rc == 0; i++) {
    uint64_t b = j->r[2 * i], e = j->r[2 * i + 1];
    if (!j->clear) {
      j->rc = written_runs(pm, b, e, 0, 0, &j->out, &j->n, &j->cap);
      continue;
    }
    /* Present pages protected again; swapped ones only listed (they stay
     * listed until read in: never fewer than were written). */
    j->rc = written_runs(pm, b, e, 1, PAGE_IS_PRESENT, &j->out, &j->n, &j->cap);
    if (j->rc == 0) j->rc = written_runs(pm, b, e, 0, PAGE_IS_SWAPPED, &j->out, &j->n, &j->cap);
  }
  close(pm);
  return NULL;
}

#define WRITTEN_THREADS_MAX 4

PyObject *ur_py_written_pages(PyObject *Py_UNUSED(self), PyObject *args) {
  int pid, clear;
  unsigned threads = 1;
  Py_buffer ranges;
  if (!PyArg_ParseTuple(args, "iy*p|I", &pid, &ranges, &clear, &threads)) return NULL;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/pagemap", pid);
  const uint64_t *r = ranges.buf;
  size_t nr = (size_t)ranges.len / 16;
  if (threads < 1) threads = 1;
  if (threads > WRITTEN_THREADS_MAX) threads = WRITTEN_THREADS_MAX;
  /* The page-table walk over the whole of the tracked memory is the stop's
   * longest step when little was written: split it by bytes, each walker
   * taking whole pages of its share (the target is stopped: its cores are
   * free). Shares are cut inside a range where need be. */
  uint64_t *cut = PyMem_Malloc((nr + WRITTEN_THREADS_MAX) * 2 * sizeof(uint64_t));
  struct written_job jobs[WRITTEN_THREADS_MAX];
  memset(jobs, 0, sizeof jobs);
  if (!cut) {
    PyBuffer_Release(&ranges);
    return PyErr_NoMemory();
  }
  uint64_t total = 0;
  for (size_t i = 0; i < nr; i++) total += r[2 * i + 1] - r[2 * i];
  uint64_t share = (total / threads + 4095) & ~4095ull;
  size_t nc = 0, k = 0;
  uint64_t filled = 0;
  jobs[0].r = cut;
  for (size_t i = 0; i < nr; i++) {
    uint64_t b = r[2 * i], e = r[2 * i + 1];
    while (b < e) {
      uint64_t take = e - b;
      if (k + 1 < threads && filled + take > share) take = share - filled;
      if (take) {
        cut[2 * nc] = b;
        cut[2 * nc + 1] = b + take;
        nc++;
        jobs[k].nr++;
        filled += take;
        b += take;
      }
      if (k + 1 < threads && filled >= share) {
        k++;
        jobs[k].r = cut + 2 * nc;
        filled = 0;
      }
    }
  }
  unsigned used = (unsigned)k + 1;
  pthread_t tid[WRITTEN_THREADS_MAX];
  int started[WRITTEN_THREADS_MAX] = {0};
  Py_BEGIN_ALLOW_THREADS
  for (unsigned t = 0; t < used; t++) {
    jobs[t].path = path;
    jobs[t].clear = clear;
    if (t > 0 && jobs[t].nr) started[t] = pthread_create(&tid[t], NULL, written_job_run, &jobs[t]) == 0;
  }
  for (unsigned t = 0; t < used; t++)
    if (t == 0 || (jobs[t].nr && !started[t])) written_job_run(&jobs[t]);
  for (unsigned t = 1; t < used; t++)
    if (started[t]) pthread_join(tid[t], NULL);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&ranges);
  PyMem_Free(cut);
  int rc = 0;
  size_t n = 0;
  for (unsigned t = 0; t < used; t++) {
    if (jobs[t].rc < 0 && rc == 0) rc = jobs[t].rc;
    n += jobs[t].n;
  }
  PyObject *res = NULL;
  if (rc < 0) {
    errno = -rc;
    PyErr_SetFromErrno(PyExc_OSError);
  } else if ((res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 16))) != NULL) {
    char *dst = PyBytes_AS_STRING(res);
    for (unsigned t = 0; t < used; t++) {
      memcpy(dst, jobs[t].out, jobs[t].n * 16);
      dst += jobs[t].n * 16;
    }
  }
  for (unsigned t = 0; t < used; t++) free(jobs[t].out);
  return res;
}

/* Past this many pending words, a word is a root at once (a root too many
 * hides a leak, never invents one). */
#define PENDING_MAX ((size_t)1 << 22)

struct remark {
  const uint64_t *cand; /* (begin, size) */
  size_t n;
  uint8_t *state;
  uint8_t *store;
  uint64_t *off; /* store offset of each candidate, n + 1 */
  size_t *stack;
  size_t top;
  uint64_t rescued;
  uint64_t lo, hi; /* [lowest begin, highest reach) */
  uint64_t *pages; /* a bit per hashed 4 KiB page that a candidate reaches */
  uint64_t *pending; /* (address, candidate) pairs */
  size_t npending, cap;
  int nomem;
};

#define PAGE_BITS 20

static inline uint64_t page_slot(uint64_t v) {
  return ((v >> 12) * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - PAGE_BITS);
}

/* The candidate v refers to (ur_block_reach, the mark's rule), or n. The
 * candidates are the shim's registry's (the concurrent mark runs on its
 * write tracking): requested sizes. */
static size_t find(const struct remark *m, uint64_t v) {
  size_t lo = 0, hi = m->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (m->cand[2 * mid] <= v)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return m->n;
  return v < ur_block_reach(m->cand, lo - 1, UR_SIZES_REQUESTED) ? lo - 1 : m->n;
}

/* The candidate v points into, if one still is (else n). */
static size_t target_of(const struct remark *m, uint64_t v) {
  /* Most words point nowhere near a candidate: two tests, no search. */
  if (v - m->lo >= m->hi - m->lo) return m->n;
  uint64_t slot = page_slot(v);
  if (!(m->pages[slot / 64] & ((uint64_t)1 << (slot % 64)))) return m->n;
  size_t i = find(m, v);
  return i < m->n && m->state[i] == CAND ? i : m->n;
}

static void rescue(struct remark *m, size_t i) {
  m->state[i] = RESCUED;
  m->rescued++;
  m->stack[m->top++] = i;
}

static void hit(struct remark *m, uint64_t v) {
  size_t i = target_of(m, v);
  if (i < m->n) rescue(m, i);
}

static void scan_words(struct remark *m, const uint8_t *p, uint64_t len) {
  for (uint64_t k = 0; k + WORD <= len; k += WORD) {
    uint64_t v;
    memcpy(&v, p + k, WORD);
    hit(m, v);
  }
}

/* Words held at address `at` whose roots-ness the last stop decides. */
static void defer_words(struct remark *m, const uint8_t *p, uint64_t at, uint64_t len) {
  for (uint64_t k = 0; k + WORD <= len; k += WORD) {
    uint64_t v;
    memcpy(&v, p + k, WORD);
    size_t i = target_of(m, v);
    if (i == m->n) continue;
    if (m->npending == m->cap) {
      size_t nc = m->cap ? m->cap * 2 : 256;
      uint64_t *q = nc <= PENDING_MAX ? realloc(m->pending, nc * 2 * sizeof(uint64_t)) : NULL;
      if (!q) {
        rescue(m, i);
        continue;
      }
      m->pending = q;
      m->cap = nc;
    }
    m->pending[2 * m->npending] = at + k;
    m->pending[2 * m->npending + 1] = i;
    m->npending++;
  }
}

static void scan_store(struct remark *m, size_t i) {
  scan_words(m, m->store + m->off[i], m->off[i + 1] - m->off[i]);
}

static void drain(struct remark *m) {
  while (m->top) scan_store(m, m->stack[--m->top]);
}

/* The words of [lo, hi) in a run that begins at b (page aligned) and is
 * held at p: every 8-aligned word that overlaps it. A word lies where its
 * address says, not where the last candidate ended: a candidate of 501
 * bytes ends 5 bytes into a word, and reading on from there would read
 * every word up to the next candidate 5 bytes off (each pointer in them
 * missed, the blocks it reaches reported as leaks). */
static void scan_span(struct remark *m, const uint8_t *p, uint64_t b, uint64_t lo, uint64_t hi) {
  uint64_t from = lo & ~(uint64_t)(WORD - 1), to = (hi + WORD - 1) & ~(uint64_t)(WORD - 1);
  if (to > from) scan_words(m, p + (from - b), to - from);
}

static void defer_span(struct remark *m, const uint8_t *p, uint64_t b, uint64_t lo, uint64_t hi) {
  uint64_t from = lo & ~(uint64_t)(WORD - 1), to = (hi + WORD - 1) & ~(uint64_t)(WORD - 1);
  if (to > from) defer_words(m, p + (from - b), from, to - from);
}

/* Words of the page runs: the parts inside candidates go to the store, the
 * rest (and the parts inside rescued or gone candidates) are roots. A word
 * that straddles a candidate's end is a root too: the candidate's stored
 * words stop before it, and a root too many hides no leak it should not. */
static void pages(struct remark *m, const uint64_t *runs, size_t nruns, const uint8_t *bytes,
                  int roots) {
  uint64_t at = 0;
  for (size_t r = 0; r < nruns; r++) {
    uint64_t b = runs[2 * r], e = runs[2 * r + 1];
    const uint8_t *p = bytes + at;
    at += e - b;
    /* The first candidate ending after b. */
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      uint64_t cs = m->cand[2 * mid + 1];
      if (m->cand[2 * mid] + (cs ? cs : 1) <= b)
        lo = mid + 1;
      else
        hi = mid;
    }
    uint64_t pos = b;
    for (size_t i = lo; pos < e; i++) {
      uint64_t cb = i < m->n ? m->cand[2 * i] : e, cs = i < m->n ? m->cand[2 * i + 1] : 0;
      uint64_t ce = cb + cs;
      if (cb > e) cb = e;
      /* [pos, cb): outside every candidate. */
      if (cb > pos) {
        if (roots) defer_span(m, p, b, pos, cb);
        pos = cb;
      }
      if (i >= m->n || pos >= e) break;
      uint64_t from = pos > cb ? pos : cb, to = ce < e ? ce : e;
      if (to > from) {
        memcpy(m->store + m->off[i] + (from - m->cand[2 * i]), p + (from - b), to - from);
        if (roots && m->state[i] != CAND) scan_span(m, p, b, from, to);
        pos = to;
      }
    }
  }
}

/* Whether a sorted, disjoint list of (begin, end) pairs holds a. */
static int in_ranges(const uint64_t *r, size_t n, uint64_t a) {
  size_t i = ur_range_after(r, n, a);
  return i < n && r[2 * i] <= a;
}

/* The pending words carried in, less those of pages read again now (their
 * bytes are older than these): kept at the front of m->pending. */
static int keep_pending(struct remark *m, const uint64_t *old, size_t nold, const uint64_t *runs,
                        size_t nruns) {
  uint64_t *sorted_runs = malloc((nruns ? nruns : 1) * 2 * sizeof(uint64_t));
  if (!sorted_runs) return -1;
  memcpy(sorted_runs, runs, nruns * 2 * sizeof(uint64_t));
  qsort(sorted_runs, nruns, 2 * sizeof(uint64_t), ur_by_first_u64);
  m->cap = nold > 256 ? nold : 256;
  m->pending = malloc(m->cap * 2 * sizeof(uint64_t));
  if (!m->pending) {
    free(sorted_runs);
    return -1;
  }
  for (size_t k = 0; k < nold; k++) {
    if (in_ranges(sorted_runs, nruns, old[2 * k]) || old[2 * k + 1] >= m->n) continue;
    m->pending[2 * m->npending] = old[2 * k];
    m->pending[2 * m->npending + 1] = old[2 * k + 1];
    m->npending++;
  }
  free(sorted_runs);
  return 0;
}

static int remark_setup(struct remark *m, Py_buffer *cand, Py_buffer *state, Py_buffer *store) {
  m->cand = cand->buf;
  m->n = (size_t)cand->len / 16;
  m->state = state->buf;
  m->store = store->buf;
  if ((size_t)state->len < m->n) {
    PyErr_SetString(PyExc_ValueError, "remark: state too short");
    return -1;
  }
  m->off = malloc((m->n + 1) * sizeof(uint64_t));
  m->stack = malloc((m->n + 1) * sizeof(size_t));
  m->pages = calloc(((size_t)1 << PAGE_BITS) / 64, sizeof(uint64_t));
  if (!m->off || !m->stack || !m->pages) {
    PyErr_NoMemory();
    return -1;
  }
  m->off[0] = 0;
  m->lo = UINT64_MAX;
  for (size_t i = 0; i < m->n; i++) {
    uint64_t b = m->cand[2 * i], sz = m->cand[2 * i + 1], e = ur_block_reach(m->cand, i, UR_SIZES_REQUESTED);
    m->off[i + 1] = m->off[i] + sz;
    if (b < m->lo) m->lo = b;
    if (e > m->hi) m->hi = e;
    for (uint64_t p = b >> 12; p <= (e - 1) >> 12; p++) {
      uint64_t slot = page_slot(p << 12);
      m->pages[slot / 64] |= (uint64_t)1 << (slot % 64);
    }
  }
  if (m->lo > m->hi) m->lo = m->hi = 0;
  if ((uint64_t)store->len < m->off[m->n]) {
    PyErr_SetString(PyExc_ValueError, "remark: store smaller than the candidates");
    return -1;
  }
  return 0;
}

static void remark_free(struct remark *m) {
  free(m->off);
  free(m->stack);
  free(m->pages);
  free(m->pending);
}

PyObject *ur_py_remark(PyObject *Py_UNUSED(self), PyObject *args) {
  Py_buffer cand, state, store, runs, bytes, values, pending;
  int roots;
  if (!PyArg_ParseTuple(args, "y*w*w*y*y*y*py*", &cand, &state, &store, &runs, &bytes, &values,
                        &roots, &pending))
    return NULL;
  PyObject *res = NULL;
  struct remark m = {0};
  size_t nruns = (size_t)runs.len / 16;
  uint64_t total = 0;
  for (size_t r = 0; r < nruns; r++) {
    const uint64_t *rr = runs.buf;
    total += rr[2 * r + 1] - rr[2 * r];
  }
  if ((uint64_t)bytes.len < total) {
    PyErr_SetString(PyExc_ValueError, "remark: page bytes too short");
    goto done;
  }
  if (remark_setup(&m, &cand, &state, &store) < 0) goto done;
  if (keep_pending(&m, pending.buf, (size_t)pending.len / 16, runs.buf, nruns) < 0) {
    PyErr_NoMemory();
    goto done;
  }
  Py_BEGIN_ALLOW_THREADS
  /* The store first: a candidate rescued below is scanned as it is now. */
  pages(&m, runs.buf, nruns, bytes.buf, 0);
  for (size_t i = 0; i < m.n; i++) {
    if (m.state[i] == GONE_PENDING) {
      m.state[i] = GONE;
      scan_store(&m, i);
    }
  }
  if (roots) pages(&m, runs.buf, nruns, bytes.buf, 1);
  scan_words(&m, values.buf, ((uint64_t)values.len / WORD) * WORD);
  drain(&m);
  qsort(m.pending, m.npending, 2 * sizeof(uint64_t), ur_by_first_u64);
  Py_END_ALLOW_THREADS
  res = Py_BuildValue("(Ky#)", (unsigned long long)m.rescued, (const char *)m.pending,
                      (Py_ssize_t)(m.npending * 16));
done:
  remark_free(&m);
  PyBuffer_Release(&cand);
  PyBuffer_Release(&state);
  PyBuffer_Release(&store);
  PyBuffer_Release(&runs);
  PyBuffer_Release(&bytes);
  PyBuffer_Release(&values);
  PyBuffer_Release(&pending);
  return res;
}

/* The first of n pairs (sorted by their first word) whose first word is at
 * least v, or n. */
static size_t first_at_least(const uint64_t *pairs, size_t n, uint64_t v) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (pairs[2 * mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Marks each pending word that lies in a block: pending sorted by address. */
static void pending_in_blocks(const uint64_t *pend, size_t np, const uint64_t *blocks, size_t nb,
                              uint8_t *counts) {
  for (size_t k = 0; k < nb && np; k++) {
    uint64_t b = blocks[2 * k], e = b + (blocks[2 * k + 1] ? blocks[2 * k + 1] : 1);
    for (size_t j = first_at_least(pend, np, b); j < np && pend[2 * j] < e; j++) counts[j] = 1;
  }
}

PyObject *ur_py_resolve(PyObject *Py_UNUSED(self), PyObject *args) {
  Py_buffer cand, state, store, pending, ranges, blocks;
  if (!PyArg_ParseTuple(args, "y*w*w*y*y*y*", &cand, &state, &store, &pending, &ranges, &blocks))
    return NULL;
  PyObject *res = NULL;
  struct remark m = {0};
  size_t np = (size_t)pending.len / 16;
  uint8_t *counts = calloc(np ? np : 1, 1);
  if (!counts) {
    PyErr_NoMemory();
    goto done;
  }
  if (remark_setup(&m, &cand, &state, &store) < 0) goto done;
  const uint64_t *pend = pending.buf, *r = ranges.buf;
  size_t nr = (size_t)ranges.len / 16;
  Py_BEGIN_ALLOW_THREADS
  pending_in_blocks(pend, np, blocks.buf, (size_t)blocks.len / 16, counts);
  for (size_t j = 0; j < np; j++) {
    size_t i = (size_t)pend[2 * j + 1];
    if (i >= m.n || m.state[i] != CAND) continue;
    if (counts[j] || in_ranges(r, nr, pend[2 * j])) rescue(&m, i);
  }
  drain(&m);
  Py_END_ALLOW_THREADS
  res = PyLong_FromUnsignedLongLong(m.rescued);
done:
  free(counts);
  remark_free(&m);
  PyBuffer_Release(&cand);
  PyBuffer_Release(&state);
  PyBuffer_Release(&store);
  PyBuffer_Release(&pending);
  PyBuffer_Release(&ranges);
  PyBuffer_Release(&blocks);
  return res;
}

/* For each candidate (sorted (begin, size)), 1 if allocs (any order)
 * holds the same pair. */
PyObject *ur_py_pairs_in(PyObject *Py_UNUSED(self), PyObject *args) {
  Py_buffer cand, allocs;
  if (!PyArg_ParseTuple(args, "y*y*", &cand, &allocs)) return NULL;
  size_t n = (size_t)cand.len / 16, na = (size_t)allocs.len / 16;
  PyObject *res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
  if (res) {
    uint8_t *mask = (uint8_t *)PyBytes_AS_STRING(res);
    const uint64_t *c = cand.buf, *a = allocs.buf;
    memset(mask, 0, n);
    Py_BEGIN_ALLOW_THREADS
    /* A registry's decoded pairs come sorted by address: then each
     * candidate is looked up (the few in the many), else each pair. */
    int sorted = 1;
    for (size_t k = 1; k < na && sorted; k++) sorted = a[2 * k - 2] < a[2 * k];
    for (size_t i = 0; sorted && i < n; i++) {
      size_t lo = first_at_least(a, na, c[2 * i]);
      mask[i] = lo < na && a[2 * lo] == c[2 * i] && a[2 * lo + 1] == c[2 * i + 1];
    }
    for (size_t k = 0; !sorted && k < na && n; k++) {
      size_t lo = first_at_least(c, n, a[2 * k]);
      if (lo < n && c[2 * lo] == a[2 * k] && c[2 * lo + 1] == a[2 * k + 1]) mask[lo] = 1;
    }
    Py_END_ALLOW_THREADS
  }
  PyBuffer_Release(&cand);
  PyBuffer_Release(&allocs);
  return res;
}
