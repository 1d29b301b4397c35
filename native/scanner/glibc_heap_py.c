/* _native.walk_glibc_heap: the Python face of glibc_heap.c. */
#include "glibc_heap.h"
#include "native.h"

static size_t read_reader(void *ctx, uint64_t addr, void *buf, size_t len) {
  return ur_reader_read(ctx, addr, buf, len);
}

PyObject *ur_py_walk_glibc_heap(PyObject *Py_UNUSED(self), PyObject *args) {
  PyObject *source;
  unsigned minor;
  unsigned long long main_arena, mp, page_size;
  Py_buffer tb, ab, pb = {0};
  if (!PyArg_ParseTuple(args, "OIKKy*y*K|y*", &source, &minor, &main_arena, &mp, &tb, &ab,
                        &page_size, &pb))
    return NULL;
  PyObject *result = NULL;
  struct ur_glibc_layout layout;
  struct ur_reader reader;
  if (tb.len % 8 || ab.len % 16 || pb.len % 16 || ((uintptr_t)tb.buf & 7) ||
      ((uintptr_t)ab.buf & 7) || ((uintptr_t)pb.buf & 7)) {
    PyErr_SetString(PyExc_ValueError,
                    "tcaches: packed u64; anon, present: packed u64 pairs (aligned)");
    goto out;
  }
  if (ur_glibc_layout_for(minor, &layout) < 0) {
    PyErr_Format(PyExc_ValueError, "glibc 2.%u is not supported", minor);
    goto out;
  }
  if (ur_reader_open(source, &reader) < 0) goto out;
  struct ur_gh_in in = {
      .layout = &layout,
      .read = read_reader,
      .ctx = &reader,
      .main_arena = main_arena,
      .mp = mp,
      .tcaches = tb.buf,
      .ntcaches = (size_t)tb.len / 8,
      .anon = ab.buf,
      .nanon = (size_t)ab.len / 16,
      .page_size = page_size,
      .present = pb.obj ? pb.buf : NULL,
      .npresent = (size_t)pb.len / 16,
  };
  struct ur_gh_out res;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_glibc_heap_walk(&in, &res);
  Py_END_ALLOW_THREADS
  ur_reader_close(&reader);
  if (rc == -ENOMEM) {
    PyErr_NoMemory();
    goto out;
  }
  const struct ur_gh_stats *s = &res.stats;
  result = Py_BuildValue(
      "{s:y#,s:s,s:O,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "allocs",
      res.allocs ? (const char *)res.allocs : "", (Py_ssize_t)(res.nallocs * 16), "error",
      rc ? res.error : "", "busy", rc == -EBUSY ? Py_True : Py_False, "arenas",
      (unsigned long long)s->arenas, "heaps", (unsigned long long)s->heaps, "chunks",
      (unsigned long long)s->chunks, "in_use", (unsigned long long)s->in_use, "in_use_bytes",
      (unsigned long long)s->in_use_bytes, "free_binned", (unsigned long long)s->free_binned,
      "free_fast", (unsigned long long)s->free_fast, "free_tcache",
      (unsigned long long)s->free_tcache, "mmapped", (unsigned long long)s->mmapped,
      "mmapped_bytes", (unsigned long long)s->mmapped_bytes, "internal",
      (unsigned long long)s->internal);
  free(res.allocs);
out:
  PyBuffer_Release(&tb);
  PyBuffer_Release(&ab);
  if (pb.obj) PyBuffer_Release(&pb);
  return result;
}
