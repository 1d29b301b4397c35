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

#include "heap_walker.h"
#include "memory.h"
#include "native.h"
#include "pthread_team.h"
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

/* Buffers from Python may be unaligned (memoryview slices): copy those. */
static const uint64_t *aligned_words(Py_buffer *b, uint64_t **owned) {
  *owned = NULL;
  if (((uintptr_t)b->buf & 7) == 0) return b->buf;
  *owned = malloc(b->len ? (size_t)b->len : 1);
  if (*owned) memcpy(*owned, b->buf, (size_t)b->len);
  return *owned;
}

static uint64_t now_ns(void) { return ur_now_ns(); }

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

PyObject *ur_py_sweep(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"memory",   "allocs",  "root_ranges", "root_values", "stack_ids",
                           "excluded", "cache_mb", "release",    "threads",     "layout",
                           "frozen",   NULL};
  PyObject *source;
  int pid = -1;
  unsigned long long cache_mb = 0;
  unsigned threads = 1;
  int frozen = 0;
  PyObject *release_obj = NULL;
  Py_buffer ab, rb, vb, sb = {0}, eb = {0}, zb = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Oy*y*y*|$y*y*KOIy*p", kwlist, &source, &ab, &rb,
                                   &vb, &sb, &eb, &cache_mb, &release_obj, &threads, &zb,
                                   &frozen))
    return NULL;
  if (threads < 1) threads = 1;
  if (threads > UR_SWEEP_MAX_THREADS) threads = UR_SWEEP_MAX_THREADS;
  void *release = NULL;
  struct ur_pread_mem *copy = ur_memory_copy_mem(source);
  if (!copy && PyLong_Check(source)) pid = (int)PyLong_AsLong(source);
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
    return NULL;
  }
  PyObject *result = NULL;
  uint64_t *own_a = NULL, *own_r = NULL, *own_v = NULL, *own_s = NULL, *own_e = NULL;
  uint64_t *own_z = NULL;
  size_t nallocs = (size_t)ab.len / 16;
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
  if (!allocs || !ranges || !values || (eb.buf && !excluded) || (sb.buf && sb.len && !ids) ||
      (zb.buf && zb.len && !zeros)) {
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
  if (copy) copy->mem.pages_skipped = 0;
  uint64_t root_chunks = chunks_spanned(ranges, ranges + 1, 2, in.nranges, 0);
  struct ur_frozen_view views[UR_SWEEP_MAX_THREADS];
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
    rc = ur_mem_open(mem, pid, cache_mb ? cache_mb << 20 : cache_bytes_for(chunks + root_chunks));
    opened = rc == 0;
    if (rc == 0 && zeros) set_layout(mem, zeros, (size_t)zb.len / 24); /* else: read all */
    if (rc == 0)
      released = copy_then_release(mem, allocs, nallocs, ranges, in.nranges, release) && release;
  }
  /* The walker only keeps the reader's address until marking starts. */
  if (rc == 0) rc = ur_walker_init(&w, &mem->mem, allocs, nallocs);
  if (rc == 0 && !opened) {
    uint64_t chunks = chunks_spanned(w.begin, w.end, 1, w.n, 0) + root_chunks;
    rc = ur_mem_open(mem, pid, cache_mb ? cache_mb << 20 : cache_bytes_for(chunks));
    opened = rc == 0;
    if (rc == 0 && zeros) set_layout(mem, zeros, (size_t)zb.len / 24);
  }
  /* Several marking threads only over a frozen cache: each reads it through
   * a view of its own, and nothing is loaded any more. */
  team_size = rc == 0 && mem->frozen ? threads : 1;
  if (team_size > 1) {
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
  for (unsigned k = 1; k < team_size; k++) mem->mem.pages_skipped += views[k].mem.pages_skipped;
  if (rc == -ENOMEM && mem->frozen_miss) rc = -EFAULT; /* a bug: reported as such, not as OOM */
  Py_END_ALLOW_THREADS
  if (rc == 0) {
    result = Py_BuildValue(
        "{s:y#,s:y#,s:K,s:K,s:K,s:K,s:K,s:K,s:n,s:K,s:n,s:K,s:O,s:I}", "unreachable",
        res.unreachable ? (const char *)res.unreachable : "", (Py_ssize_t)(res.nunreachable * 4),
        "leaks", res.leaks ? (const char *)res.leaks : "",
        (Py_ssize_t)(res.nleaks * sizeof(*res.leaks)), "unreachable_count",
        (unsigned long long)res.unreachable_count, "unreachable_bytes",
        (unsigned long long)res.unreachable_bytes, "bytes_scanned",
        (unsigned long long)res.bytes_scanned, "pages_skipped",
        (unsigned long long)mem->mem.pages_skipped, "mark_ns", (unsigned long long)res.mark_ns,
        "fold_ns", (unsigned long long)res.fold_ns, "overlapping", (Py_ssize_t)w.overlapping,
        "bytes_read", (unsigned long long)mem->bytes_loaded, "allocation_count",
        (Py_ssize_t)w.distinct, "allocation_bytes", (unsigned long long)w.distinct_bytes,
        "released_early", released ? Py_True : Py_False, "mark_threads", w.marked_by);
  } else if (!opened && rc != -ENOMEM) {
    ur_py_raise(rc, rc == -ESRCH ? "no such process" : "cannot open the process's memory");
  } else {
    ur_py_raise(rc, "sweep failed");
  }
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
  PyBuffer_Release(&ab);
  PyBuffer_Release(&rb);
  PyBuffer_Release(&vb);
  if (sb.buf) PyBuffer_Release(&sb);
  if (eb.buf) PyBuffer_Release(&eb);
  if (zb.buf) PyBuffer_Release(&zb);
  return result;
}
