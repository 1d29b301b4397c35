/* Python-facing pieces of unreachable._native, shared by module.c. The C
 * core (capture, snapshot, memory, walker, folding) never includes Python.h,
 * so the C unit tests link it without Python. */
#ifndef UR_SCANNER_NATIVE_H
#define UR_SCANNER_NATIVE_H

#include <errno.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

extern PyTypeObject ur_session_type;
extern PyTypeObject ur_memory_copy_type;
extern PyTypeObject ur_big_buffer_type;
/* A BigBuffer owning p (an alloc.h array, freed with it; also on failure). */
PyObject *ur_big_buffer(void *p, size_t len);

/* Where a native reader takes memory from (memory_copy.c): a pid's
 * /proc/PID/mem, or a finished MemoryCopy. */
struct ur_pread_mem;
struct ur_reader {
  int fd;
  struct ur_pread_mem *copy;
  int pagemap_fd; /* opened by the first ur_reader_read_anon of a pid; -2: unavailable */
  int pid;
  struct ur_cow *cow; /* a copy-on-write snapshot's saved pages over the live reads */
  int vm_read_refused; /* process_vm_readv was refused: /proc/PID/mem only */
};
/* source: an int pid or a MemoryCopy; -1 with an exception set. */
int ur_reader_open(PyObject *source, struct ur_reader *r);
void ur_reader_close(struct ur_reader *r);
/* As ur_mem_read_direct: unreadable bytes zeroed; returns the readable count. */
size_t ur_reader_read(struct ur_reader *r, uint64_t addr, void *buf, size_t len);
/* The same for private anonymous memory only (the shim's region: registry
 * tables, thread slots, frames, big and mostly untouched): pages the process
 * does not have are zero and not read, since reading them through /proc
 * would map the zero page into it. */
size_t ur_reader_read_anon(struct ur_reader *r, uint64_t addr, void *buf, size_t len);
/* The parts of [addr, addr + len) the source has pages for, as sorted
 * (begin, end) pairs in *parts (the caller frees them): a process's present
 * or swapped pages (and those a copy-on-write snapshot sealed), a finished
 * copy's chunks; all of it where that cannot be known (no PAGEMAP_SCAN).
 * The rest reads as zero. 0 or -ENOMEM. */
int ur_reader_present(struct ur_reader *r, uint64_t addr, uint64_t len, uint64_t **parts,
                      size_t *n);
/* The finished copy's cache, or NULL if obj is not a finished MemoryCopy. */
struct ur_pread_mem *ur_memory_copy_mem(PyObject *obj);
/* A taken copy-on-write snapshot's saved pages (and its pid), or NULL. */
struct ur_cow *ur_memory_copy_cow(PyObject *obj, int *pid);

PyObject *ur_py_read_registry(PyObject *self, PyObject *args);
PyObject *ur_py_read_stacks(PyObject *self, PyObject *args);
PyObject *ur_py_sweep(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *ur_py_nudge_thread(PyObject *self, PyObject *args);
PyObject *ur_py_pidfd_getfd(PyObject *self, PyObject *args);
PyObject *ur_py_tee(PyObject *self, PyObject *args);
PyObject *ur_py_open_as_user(PyObject *self, PyObject *args);
PyObject *ur_py_pin_open(PyObject *self, PyObject *args);
PyObject *ur_py_pin_shut(PyObject *self, PyObject *args);
PyObject *ur_py_present_ranges(PyObject *self, PyObject *args);
PyObject *ur_py_read_spans(PyObject *self, PyObject *args);
PyObject *ur_py_written_pages(PyObject *self, PyObject *args);
PyObject *ur_py_track_arm(PyObject *self, PyObject *args);
PyObject *ur_py_track_disarm(PyObject *self, PyObject *args);
PyObject *ur_py_remark(PyObject *self, PyObject *args);
PyObject *ur_py_resolve(PyObject *self, PyObject *args);
PyObject *ur_py_pairs_in(PyObject *self, PyObject *args);
PyObject *ur_py_size_map_pages(PyObject *self, PyObject *args);
PyObject *ur_py_size_map_pages_around(PyObject *self, PyObject *args);
PyObject *ur_py_set_cache_budget(PyObject *self, PyObject *args);
PyObject *ur_py_cache_bound(PyObject *self, PyObject *args);
PyObject *ur_py_code_words(PyObject *self, PyObject *args);
PyObject *ur_py_heap_words(PyObject *self, PyObject *args);
PyObject *ur_py_dedup(PyObject *self, PyObject *args);
PyObject *ur_py_walk_glibc_heap(PyObject *self, PyObject *args);

/* abi_py.c: abi.h's structures by name, and its constants (added to m). */
extern PyMethodDef ur_abi_methods[];
int ur_abi_add_constants(PyObject *m);

/* _native.sweep(release=session): the stopped Session to release once the
 * memory is copied (NULL with an exception set if it is not one), and the
 * release itself, on the tracer thread, without the GIL. */
void *ur_session_to_release(PyObject *obj);
void ur_session_release_nogil(void *session);

/* rc is -errno: raise the matching OSError subclass (ESRCH ->
 * ProcessLookupError, EPERM -> PermissionError, ETIMEDOUT -> TimeoutError),
 * EINVAL -> ValueError, ENOMEM -> MemoryError. Returns NULL. */
static inline PyObject *ur_py_raise(int rc, const char *msg) {
  int e = -rc;
  if (e == EINVAL) {
    PyErr_SetString(PyExc_ValueError, msg);
  } else if (e == ENOMEM) {
    PyErr_SetString(PyExc_MemoryError, msg);
  } else {
    PyObject *args = Py_BuildValue("(is)", e, msg);
    if (args) {
      PyErr_SetObject(PyExc_OSError, args);
      Py_DECREF(args);
    }
  }
  return NULL;
}

#endif
