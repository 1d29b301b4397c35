/* _native.sweep(): mark (heap_walker.c) then fold (leak_folding.c), with the
 * GIL released for the whole walk. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap_walker.h"
#include "leak_folding.h"
#include "memory.h"
#include "native.h"
#include "thread_capture.h"

/* Chunks the walk can touch at most: those under an allocation or a root
 * range. Sizing the cache to this means nothing is ever evicted and re-read
 * (a random-order list over a 1 GiB heap would otherwise reload a 1 MiB chunk
 * per block), bounded by half the available memory. */
static uint64_t default_cache_bytes(const struct ur_walker *w, const uint64_t *ranges,
                                    size_t nranges) {
  uint64_t chunks = 0, last = UINT64_MAX;
  for (size_t i = 0; i < w->n; i++) {
    uint64_t first = w->begin[i] >> UR_CHUNK_SHIFT, end = (w->end[i] - 1) >> UR_CHUNK_SHIFT;
    if (first == last) first++;
    if (end >= first && end != UINT64_MAX) chunks += end - first + 1;
    last = end;
  }
  for (size_t i = 0; i < nranges; i++)
    if (ranges[2 * i + 1] > ranges[2 * i])
      chunks += ((ranges[2 * i + 1] - 1) >> UR_CHUNK_SHIFT) - (ranges[2 * i] >> UR_CHUNK_SHIFT) + 1;
  uint64_t avail = 0;
  FILE *f = fopen("/proc/meminfo", "re");
  if (f) {
    char line[128];
    unsigned long long kb;
    while (fgets(line, sizeof(line), f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (uint64_t)kb << 10;
    fclose(f);
  }
  chunks += 64; /* headroom: the walker batches only while 32 chunks are free */
  uint64_t bytes = chunks << UR_CHUNK_SHIFT, cap = avail ? avail / 2 : (UINT64_C(1) << 30);
  if (bytes > cap) bytes = cap;
  if (bytes < (UINT64_C(64) << 20)) bytes = UINT64_C(64) << 20;
  return bytes;
}

/* Buffers from Python may be unaligned (memoryview slices): copy those. */
static const uint64_t *aligned_words(Py_buffer *b, uint64_t **owned) {
  *owned = NULL;
  if (((uintptr_t)b->buf & 7) == 0) return b->buf;
  *owned = malloc(b->len ? (size_t)b->len : 1);
  if (*owned) memcpy(*owned, b->buf, (size_t)b->len);
  return *owned;
}

PyObject *ur_py_sweep(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"mem_pid", "allocs", "root_ranges", "root_values", "cache_mb", NULL};
  int pid;
  unsigned long long cache_mb = 0;
  Py_buffer ab, rb, vb;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iy*y*y*|K", kwlist, &pid, &ab, &rb, &vb,
                                   &cache_mb))
    return NULL;
  PyObject *result = NULL;
  uint64_t *own_a = NULL, *own_r = NULL, *own_v = NULL;
  if (ab.len % 16 || rb.len % 16 || vb.len % 8) {
    PyErr_SetString(PyExc_ValueError,
                    "allocs and root_ranges must be packed u64 pairs, root_values packed u64");
    goto out;
  }
  if ((size_t)ab.len / 16 > UR_WALKER_MAX_ALLOCS) {
    PyErr_SetString(PyExc_ValueError, "too many allocations");
    goto out;
  }
  const uint64_t *allocs = aligned_words(&ab, &own_a);
  const uint64_t *ranges = aligned_words(&rb, &own_r);
  const uint64_t *values = aligned_words(&vb, &own_v);
  if (!allocs || !ranges || !values) {
    PyErr_NoMemory();
    goto out;
  }
  struct ur_mem mem;
  struct ur_walker w;
  uint32_t *unreachable = NULL;
  struct ur_leak *leaks = NULL;
  size_t nunreachable = 0, nleaks = 0;
  uint64_t t0 = 0, t1 = 0, t2 = 0, marked_bytes = 0;
  int rc, opened = 0;
  Py_BEGIN_ALLOW_THREADS
  t0 = ur_now_ns();
  /* The walker only keeps the reader's address until marking starts. */
  rc = ur_walker_init(&w, &mem, allocs, (size_t)ab.len / 16);
  if (rc == 0) {
    uint64_t cache = cache_mb ? cache_mb << 20 : default_cache_bytes(&w, ranges, (size_t)rb.len / 16);
    rc = ur_mem_open(&mem, pid, cache);
    opened = rc == 0;
  }
  if (rc == 0) rc = ur_walker_mark(&w, ranges, (size_t)rb.len / 16, values, (size_t)vb.len / 8);
  marked_bytes = w.bytes_scanned;
  t1 = ur_now_ns();
  if (rc == 0) rc = ur_fold_leaks(&w, &unreachable, &nunreachable, &leaks, &nleaks);
  t2 = ur_now_ns();
  Py_END_ALLOW_THREADS
  uint64_t unreachable_bytes = 0;
  for (size_t i = 0; rc == 0 && i < nunreachable; i++) unreachable_bytes += allocs[2 * unreachable[i] + 1];
  if (rc == 0) {
    result = Py_BuildValue("{s:y#,s:y#,s:K,s:K,s:K,s:K,s:K,s:n,s:K}", "unreachable",
                           unreachable ? (const char *)unreachable : "", (Py_ssize_t)(nunreachable * 4),
                           "leaks", leaks ? (const char *)leaks : "", (Py_ssize_t)(nleaks * sizeof(*leaks)),
                           "unreachable_bytes", (unsigned long long)unreachable_bytes,
                           "bytes_scanned", (unsigned long long)marked_bytes, "pages_skipped",
                           (unsigned long long)mem.pages_skipped, "mark_ns",
                           (unsigned long long)(t1 - t0), "fold_ns",
                           (unsigned long long)(t2 - t1), "overlapping", (Py_ssize_t)w.overlapping,
                           "bytes_read", (unsigned long long)mem.bytes_loaded);
  } else if (!opened && rc != -ENOMEM) {
    ur_py_raise(rc, rc == -ESRCH ? "no such process" : "cannot open the process's memory");
  } else {
    ur_py_raise(rc, "sweep failed");
  }
  free(unreachable);
  free(leaks);
  ur_walker_free(&w);
  if (opened) ur_mem_close(&mem);
out:
  free(own_a);
  free(own_r);
  free(own_v);
  PyBuffer_Release(&ab);
  PyBuffer_Release(&rb);
  PyBuffer_Release(&vb);
  return result;
}
