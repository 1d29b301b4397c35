/*
 * _native.MemoryCopy: the "copy" snapshot's memory (page_sync.h), and the
 * readers every native entry point takes memory through: a pid (its
 * /proc/PID/mem, the process stopped or frozen) or a MemoryCopy (finished:
 * the process runs on, the copy holds the moment it was stopped).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory.h"
#include "native.h"
#include "cow.h"
#include "page_sync.h"
#include "present_pages.h"
#include "range_list.h"

typedef struct {
  PyObject_HEAD
  int pid;
  int opened;
  int busy;     /* a sync runs with the GIL released */
  int finished; /* ur_sync_finish ran: readable, nothing more to sync */
  int pagemap;
  struct ur_pread_mem mem;
  struct ur_sync_stats stats;
  struct ur_cow *cow; /* a copy-on-write snapshot (cow.h): read live, overlaid */
  int cow_fd;         /* its reads of the live memory (read()) */
} MemoryCopy;

static void copy_close(MemoryCopy *c) {
  if (c->cow) {
    ur_cow_close(c->cow);
    free(c->cow);
    c->cow = NULL;
  }
  if (c->cow_fd > 0) close(c->cow_fd);
  c->cow_fd = 0;
  if (c->opened) ur_mem_close(&c->mem);
  if (c->pagemap >= 0) close(c->pagemap);
  c->opened = 0;
  c->pagemap = -1;
}

static int copy_init(MemoryCopy *c, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"pid", "cache_bytes", NULL};
  int pid;
  unsigned long long cache = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i|K", kwlist, &pid, &cache)) return -1;
  if (cache == 0) cache = ur_mem_cache_bound();
  if (c->opened) {
    PyErr_SetString(PyExc_RuntimeError, "MemoryCopy already initialised");
    return -1;
  }
  c->pid = pid;
  c->pagemap = -1;
  if (pid == 0) { /* no process: a core file's memory, given by load() */
    int rc = ur_mem_open(&c->mem, 0, cache);
    if (rc < 0) {
      ur_py_raise(rc, "cannot make the copy");
      return -1;
    }
    c->opened = 1;
    return 0;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/pagemap", pid);
  if ((c->pagemap = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    int e = errno == ENOENT ? ESRCH : errno;
    ur_py_raise(-e, "cannot open the process's pagemap");
    return -1;
  }
  int rc = ur_mem_open(&c->mem, pid, cache);
  if (rc < 0) {
    copy_close(c);
    ur_py_raise(rc, "cannot open the process's memory");
    return -1;
  }
  c->opened = 1;
  return 0;
}

static void copy_dealloc(MemoryCopy *c) {
  copy_close(c);
  Py_TYPE(c)->tp_free((PyObject *)c);
}

static int usable(MemoryCopy *c) {
  if (c->busy) {
    PyErr_SetString(PyExc_RuntimeError, "MemoryCopy is in use by another call");
    return 0;
  }
  if (!c->opened) {
    PyErr_SetString(PyExc_ValueError, "MemoryCopy is closed");
    return 0;
  }
  return 1;
}

static PyObject *copy_sync(MemoryCopy *c, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"ranges", "refresh", "threads", NULL};
  Py_buffer rb;
  int refresh = 0;
  unsigned threads = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|pI", kwlist, &rb, &refresh, &threads))
    return NULL;
  PyObject *result = NULL;
  if (!usable(c)) goto out;
  if (c->finished) {
    PyErr_SetString(PyExc_RuntimeError, "MemoryCopy is finished");
    goto out;
  }
  if (rb.len % sizeof(struct ur_sync_range) || ((uintptr_t)rb.buf & 7)) {
    PyErr_SetString(PyExc_ValueError, "ranges must be packed u64 (begin, end, flags) triples");
    goto out;
  }
  int rc;
  c->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_sync(&c->mem, c->pagemap, rb.buf, (size_t)rb.len / sizeof(struct ur_sync_range), refresh,
               threads, &c->stats);
  Py_END_ALLOW_THREADS
  c->busy = 0;
  if (rc == -ENOSPC) {
    PyErr_SetString(PyExc_MemoryError, "the copy does not fit in its cache");
  } else if (rc < 0) {
    ur_py_raise(rc, "cannot read the process's pagemap");
  } else {
    result = Py_NewRef(Py_None);
  }
out:
  PyBuffer_Release(&rb);
  return result;
}

static PyObject *copy_load(MemoryCopy *c, PyObject *args) {
  int fd;
  unsigned long long offset, addr, len;
  if (!PyArg_ParseTuple(args, "iKKK", &fd, &offset, &addr, &len)) return NULL;
  if (!usable(c)) return NULL;
  if (c->pid != 0 || c->finished) {
    PyErr_SetString(PyExc_RuntimeError, "load() fills an unfinished MemoryCopy(0) only");
    return NULL;
  }
  int rc;
  c->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_mem_load_file(&c->mem, fd, offset, addr, len);
  Py_END_ALLOW_THREADS
  c->busy = 0;
  if (rc == -ENOSPC) {
    PyErr_SetString(PyExc_MemoryError, "the copy does not fit in its cache");
    return NULL;
  }
  if (rc < 0) return ur_py_raise(rc, "cannot read the file into the copy");
  Py_RETURN_NONE;
}

static PyObject *copy_finish(MemoryCopy *c, PyObject *Py_UNUSED(ignored)) {
  if (!usable(c)) return NULL;
  if (!c->finished) ur_sync_finish(&c->mem);
  c->finished = 1;
  Py_RETURN_NONE;
}

static PyObject *copy_read(MemoryCopy *c, PyObject *args) {
  unsigned long long addr;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "Kn", &addr, &n)) return NULL;
  if (!usable(c)) return NULL;
  if (n < 0) {
    PyErr_SetString(PyExc_ValueError, "negative length");
    return NULL;
  }
  PyObject *out = PyBytes_FromStringAndSize(NULL, n);
  if (!out) return NULL;
  /* As a pread of /proc/PID/mem: EIO when nothing there could be read. */
  size_t got;
  if (c->cow) {
    got = ur_mem_read_direct(c->cow_fd, addr, PyBytes_AS_STRING(out), (size_t)n);
    ur_cow_overlay(c->cow, addr, (uint8_t *)PyBytes_AS_STRING(out), (size_t)n, NULL, 0);
    /* Memory of the snapshot the target has unmapped since: its saved
     * pages, the rest zero (or lost, and counted so). */
    if (got == 0 && n > 0 && ur_cow_covers(c->cow, addr, (size_t)n)) got = (size_t)n;
  } else {
    got = ur_mem_read_cached(&c->mem, addr, PyBytes_AS_STRING(out), (size_t)n);
  }
  if (got == 0 && n > 0) {
    Py_DECREF(out);
    return ur_py_raise(-EIO, "not in the copy");
  }
  return out;
}

static PyObject *copy_cow_start(MemoryCopy *c, PyObject *args) {
  int uffd;
  unsigned long long limit = 0;
  if (!PyArg_ParseTuple(args, "i|K", &uffd, &limit)) return NULL;
  /* The descriptor is ours from here, whatever happens. */
  if (!usable(c)) {
    close(uffd);
    return NULL;
  }
  if (c->cow || c->pid <= 0) {
    close(uffd);
    PyErr_SetString(PyExc_RuntimeError, "cow_start() once, on a MemoryCopy of a process");
    return NULL;
  }
  if (!limit) limit = ur_mem_cache_bound();
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/mem", c->pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int err = errno;
  struct ur_cow *cow = calloc(1, sizeof(*cow));
  int rc = fd < 0 ? -err : !cow ? -ENOMEM : ur_cow_open(cow, c->pid, uffd, limit);
  if (rc < 0) {
    if (fd >= 0) close(fd);
    if (fd < 0 || !cow) close(uffd); /* else ur_cow_open closed it */
    free(cow);
    return ur_py_raise(rc, "cannot start the copy-on-write snapshot");
  }
  c->cow = cow;
  c->cow_fd = fd;
  Py_RETURN_NONE;
}

static PyObject *copy_cow_register(MemoryCopy *c, PyObject *args) {
  Py_buffer rb;
  if (!PyArg_ParseTuple(args, "y*", &rb)) return NULL;
  PyObject *result = NULL;
  if (!c->cow || rb.len % 16 || ((uintptr_t)rb.buf & 7)) {
    PyErr_SetString(PyExc_ValueError, "cow_register(packed u64 pairs) after cow_start()");
  } else {
    size_t n;
    Py_BEGIN_ALLOW_THREADS
    n = ur_cow_register(c->cow, rb.buf, (size_t)rb.len / 16);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSize_t(n);
  }
  PyBuffer_Release(&rb);
  return result;
}

static PyObject *copy_cow_save(MemoryCopy *c, PyObject *args) {
  Py_buffer rb;
  if (!PyArg_ParseTuple(args, "y*", &rb)) return NULL;
  PyObject *result = NULL;
  if (!c->cow || rb.len % 16 || ((uintptr_t)rb.buf & 7)) {
    PyErr_SetString(PyExc_ValueError, "cow_save(packed u64 pairs) after cow_start()");
  } else {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ur_cow_save(c->cow, rb.buf, (size_t)rb.len / 16);
    Py_END_ALLOW_THREADS
    result =
        rc < 0 ? ur_py_raise(rc, "cannot save the memory left unprotected") : Py_NewRef(Py_None);
  }
  PyBuffer_Release(&rb);
  return result;
}

static PyObject *copy_cow_protect(MemoryCopy *c, PyObject *Py_UNUSED(ignored)) {
  if (!c->cow) {
    PyErr_SetString(PyExc_ValueError, "cow_protect() after cow_start()");
    return NULL;
  }
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_cow_protect(c->cow);
  Py_END_ALLOW_THREADS
  if (rc < 0) return ur_py_raise(rc, "cannot write-protect the process's memory");
  Py_RETURN_NONE;
}

static PyObject *copy_cow_seal(MemoryCopy *c, PyObject *Py_UNUSED(ignored)) {
  if (!c->cow) {
    PyErr_SetString(PyExc_ValueError, "cow_seal() after cow_start()");
    return NULL;
  }
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_cow_seal(c->cow);
  Py_END_ALLOW_THREADS
  if (rc < 0) return ur_py_raise(rc, "cannot take the copy-on-write snapshot");
  c->finished = 1;
  Py_RETURN_NONE;
}

static PyObject *copy_cow_lost(MemoryCopy *c, PyObject *Py_UNUSED(ignored)) {
  if (!c->cow) return PyBytes_FromStringAndSize(NULL, 0);
  size_t n = 0;
  uint64_t *v = ur_cow_lost(c->cow, &n);
  PyObject *out = PyBytes_FromStringAndSize((const char *)v, (Py_ssize_t)(n * 16));
  free(v);
  return out;
}

static PyObject *copy_cow_failed(MemoryCopy *c, PyObject *Py_UNUSED(ignored)) {
  return PyBool_FromLong(c->cow && __atomic_load_n(&c->cow->failed, __ATOMIC_ACQUIRE));
}

static PyObject *copy_close_py(MemoryCopy *c, PyObject *Py_UNUSED(ignored)) {
  if (c->busy) {
    PyErr_SetString(PyExc_RuntimeError, "MemoryCopy is in use by another call");
    return NULL;
  }
  /* A copy-on-write snapshot's end unregisters the target's memory (a walk
   * of its page tables) and waits for the fault server: the scan's Python
   * goes on beside it (copy_snapshot.py ends it in the background). */
  c->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  copy_close(c);
  Py_END_ALLOW_THREADS
  c->busy = 0;
  Py_RETURN_NONE;
}

static PyObject *copy_get_pid(MemoryCopy *c, void *Py_UNUSED(closure)) {
  return PyLong_FromLong(c->pid);
}

static PyObject *copy_get_stats(MemoryCopy *c, void *Py_UNUSED(closure)) {
  if (c->cow)
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "bytes_lost",
                         (unsigned long long)__atomic_load_n(&c->cow->lost, __ATOMIC_ACQUIRE),
                         "pages_saved", (unsigned long long)c->cow->n,
                         "faults", (unsigned long long)c->cow->faults, "bytes_held",
                         (unsigned long long)c->cow->held, "protect_ns",
                         (unsigned long long)c->cow->protect_ns, "seal_ns",
                         (unsigned long long)c->cow->seal_ns, "dirty",
                         (unsigned long long)c->cow->ndirty, "seal_saved",
                         (unsigned long long)c->cow->seal_saved, "dirty_faults",
                         (unsigned long long)c->cow->dirty_faults, "present_ns",
                         (unsigned long long)c->cow->present_ns, "save_reads",
                         (unsigned long long)c->cow->save_reads, "lost_unrecorded",
                         (unsigned long long)__atomic_load_n(&c->cow->lost_unrecorded,
                                                             __ATOMIC_ACQUIRE));
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "pages_read",
                       (unsigned long long)c->stats.pages_read, "pages_zeroed",
                       (unsigned long long)c->stats.pages_zeroed, "pages_kept",
                       (unsigned long long)c->stats.pages_kept, "pages_untracked",
                       (unsigned long long)c->stats.untracked, "bytes_held",
                       (unsigned long long)(c->opened ? c->mem.used_chunks * UR_CHUNK_SIZE : 0));
}

static PyObject *copy_reset_stats(MemoryCopy *c, PyObject *Py_UNUSED(ignored)) {
  memset(&c->stats, 0, sizeof(c->stats));
  Py_RETURN_NONE;
}

static PyMethodDef copy_methods[] = {
    {"sync", (PyCFunction)(void (*)(void))copy_sync, METH_VARARGS | METH_KEYWORDS,
     "sync(ranges, refresh=False, threads=1): copy the (begin, end, flags) ranges (packed "
     "u64); refresh: the process is stopped, read again only what it wrote since."},
    {"load", (PyCFunction)copy_load, METH_VARARGS,
     "load(fd, offset, addr, length): MemoryCopy(0) only: the file's bytes at offset become "
     "the memory at addr (page multiples); a core file's memory."},
    {"finish", (PyCFunction)copy_finish, METH_NOARGS,
     "finish(): the copy is complete; readers may use it, nothing more is read."},
    {"read", (PyCFunction)copy_read, METH_VARARGS,
     "read(addr, n) -> bytes: from the copy, as os.pread of /proc/PID/mem would."},
    {"reset_stats", (PyCFunction)copy_reset_stats, METH_NOARGS, "reset_stats()"},
    {"cow_start", (PyCFunction)copy_cow_start, METH_VARARGS,
     "cow_start(uffd, limit=0): a copy-on-write snapshot served from a thread of this process "
     "(cow.h); takes (and closes, whatever happens) the synchronous userfaultfd of the process; "
     "limit bounds the saved pages (0: as a cache)."},
    {"cow_register", (PyCFunction)copy_cow_register, METH_VARARGS,
     "cow_register(pairs) -> int: register (begin, end) ranges for write protection."},
    {"cow_save", (PyCFunction)copy_cow_save, METH_VARARGS,
     "cow_save(pairs): the process stopped: save these ranges whole as they are."},
    {"cow_protect", (PyCFunction)copy_cow_protect, METH_NOARGS,
     "cow_protect(): the process stopped: protect what is registered; the snapshot is taken."},
    {"cow_lost", (PyCFunction)copy_cow_lost, METH_NOARGS,
     "cow_lost() -> bytes: packed u64 (begin, end) runs the target released after the seal, "
     "unsaved, that held pages then."},
    {"cow_seal", (PyCFunction)copy_cow_seal, METH_NOARGS,
     "cow_seal(): the process stopped, all protected: the snapshot is this moment."},
    {"cow_failed", (PyCFunction)copy_cow_failed, METH_NOARGS,
     "cow_failed() -> bool: a page could not be saved; the snapshot is no longer whole."},
    {"close", (PyCFunction)copy_close_py, METH_NOARGS,
     "close(): free the copy (a copy-on-write snapshot's end; the GIL released)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef copy_getset[] = {
    {"pid", (getter)copy_get_pid, NULL, "the process copied", NULL},
    {"stats", (getter)copy_get_stats, NULL, "pages read, zeroed and kept by the syncs", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ur_memory_copy_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "unreachable._native.MemoryCopy",
    .tp_basicsize = sizeof(MemoryCopy),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "MemoryCopy(pid, cache_bytes=0): a copy of a process's memory, brought up to "
              "date in a stop (the copy snapshot); pid 0: no process, filled by load() (a core "
              "file); cache_bytes 0: up to half the available memory.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)copy_init,
    .tp_dealloc = (destructor)copy_dealloc,
    .tp_methods = copy_methods,
    .tp_getset = copy_getset,
};

struct ur_pread_mem *ur_memory_copy_mem(PyObject *obj) {
  if (!PyObject_TypeCheck(obj, &ur_memory_copy_type)) return NULL;
  MemoryCopy *c = (MemoryCopy *)obj;
  return c->opened && c->finished && !c->busy && !c->cow ? &c->mem : NULL;
}

struct ur_cow *ur_memory_copy_cow(PyObject *obj, int *pid) {
  if (!PyObject_TypeCheck(obj, &ur_memory_copy_type)) return NULL;
  MemoryCopy *c = (MemoryCopy *)obj;
  if (!c->cow || !c->finished) return NULL;
  *pid = c->pid;
  return c->cow;
}

int ur_reader_open(PyObject *source, struct ur_reader *r) {
  r->fd = -1;
  r->copy = NULL;
  r->cow = NULL;
  r->pagemap_fd = -1;
  r->pid = 0;
  r->vm_read_refused = 0;
  int cow_pid = 0;
  struct ur_cow *cow = ur_memory_copy_cow(source, &cow_pid);
  if (cow) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/mem", cow_pid);
    if ((r->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
      ur_py_raise(-(errno == ENOENT ? ESRCH : errno), "cannot open the process's memory");
      return -1;
    }
    r->pid = cow_pid;
    r->cow = cow;
    return 0;
  }
  if (PyObject_TypeCheck(source, &ur_memory_copy_type)) {
    if (!(r->copy = ur_memory_copy_mem(source))) {
      PyErr_SetString(PyExc_ValueError, "the MemoryCopy is not finished, or closed");
      return -1;
    }
    return 0;
  }
  long pid = PyLong_Check(source) ? PyLong_AsLong(source) : -1;
  if (pid < 0 || pid > INT32_MAX) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "memory source must be a pid or a MemoryCopy");
    return -1;
  }
  char path[64];
  r->pid = (int)pid;
  snprintf(path, sizeof(path), "/proc/%ld/mem", pid);
  if ((r->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    int e = errno == ENOENT ? ESRCH : errno;
    char msg[128];
    snprintf(msg, sizeof(msg), "cannot open %s: %s", path, strerror(e));
    ur_py_raise(-e, msg);
    return -1;
  }
  return 0;
}

void ur_reader_close(struct ur_reader *r) {
  if (r->fd >= 0) close(r->fd);
  if (r->pagemap_fd >= 0) close(r->pagemap_fd);
  r->fd = r->pagemap_fd = -1;
  r->copy = NULL;
  r->cow = NULL;
}

size_t ur_reader_read(struct ur_reader *r, uint64_t addr, void *buf, size_t len) {
  if (r->copy) return ur_mem_read_cached(r->copy, addr, buf, len);
  size_t got = ur_mem_read_direct(r->fd, addr, buf, len);
  ur_cow_overlay(r->cow, addr, buf, len, NULL, 0);
  return got;
}

/* The live process's pagemap, opened on first use (-2: unavailable). */
static int reader_pagemap(struct ur_reader *r) {
  if (r->pagemap_fd == -1) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/pagemap", r->pid);
    r->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->pagemap_fd < 0) r->pagemap_fd = -2;
  }
  return r->pagemap_fd;
}

size_t ur_reader_read_anon(struct ur_reader *r, uint64_t addr, void *buf, size_t len) {
  if (r->copy || len == 0) return ur_reader_read(r, addr, buf, len);
  reader_pagemap(r);
  uint64_t span[2] = {addr, addr + len}, *parts = NULL;
  size_t n = 0;
  if (r->pagemap_fd < 0 || span[1] < addr || ur_present_pages(r->pagemap_fd, span, 1, &parts, &n) < 0)
    return ur_reader_read(r, addr, buf, len);
  memset(buf, 0, len);
  size_t good = 0;
  for (size_t i = 0; i < n; i++)
    good += ur_mem_read_live(r->fd, r->pagemap_fd, r->pid, &r->vm_read_refused, parts[2 * i],
                             (uint8_t *)buf + (parts[2 * i] - addr),
                             (size_t)(parts[2 * i + 1] - parts[2 * i]));
  free(parts);
  ur_cow_overlay(r->cow, addr, buf, len, NULL, 0);
  return good;
}

/* A finished copy: the parts of the ranges in chunks it holds (a chunk it
 * does not hold was absent, zero, or is not the process's memory). */
static int append_pair(PyObject *out, uint64_t b, uint64_t e) {
  uint64_t pair[2] = {b, e};
  if (PyByteArray_Resize(out, PyByteArray_GET_SIZE(out) + 16) < 0) return -1;
  memcpy(PyByteArray_AS_STRING(out) + PyByteArray_GET_SIZE(out) - 16, pair, 16);
  return 0;
}

static int held_parts(struct ur_pread_mem *m, const uint64_t *in, size_t n, PyObject *out) {
  for (size_t i = 0; i < n; i++) {
    uint64_t b = in[2 * i], e = in[2 * i + 1], run = 0;
    int open = 0;
    for (uint64_t pos = b; pos < e;) {
      uint64_t base = pos & ~(UR_CHUNK_SIZE - 1), next = base + UR_CHUNK_SIZE;
      int held = ur_mem_find(m, base) != NULL;
      if (held && !open) run = pos;
      if (!held && open && append_pair(out, run, pos) < 0) return -1;
      open = held;
      pos = next < e && next > base ? next : e;
    }
    if (open && append_pair(out, run, e) < 0) return -1;
  }
  return 0;
}

/* The live pages' runs and those a copy-on-write snapshot's seal recorded,
 * as one sorted list (a range the target released since is gone from the
 * first, not from the snapshot). Replaces *parts; 0 or -ENOMEM. */
static int with_sealed(struct ur_cow *cow, const uint64_t *in, size_t n, uint64_t **parts,
                       size_t *np) {
  uint64_t *sealed = NULL;
  size_t ns = 0;
  if (ur_cow_present(cow, in, n, &sealed, &ns) != 0 || ns == 0) {
    free(sealed);
    return 0;
  }
  uint64_t *all = realloc(*parts, (*np + ns) * 2 * sizeof(uint64_t));
  if (!all) {
    free(sealed);
    return -ENOMEM;
  }
  memcpy(all + 2 * *np, sealed, ns * 2 * sizeof(uint64_t));
  free(sealed);
  size_t total = *np + ns, k = 0;
  qsort(all, total, 2 * sizeof(uint64_t), ur_by_first_u64);
  for (size_t i = 0; i < total; i++) {
    if (k && all[2 * i] <= all[2 * k - 1]) {
      if (all[2 * i + 1] > all[2 * k - 1]) all[2 * k - 1] = all[2 * i + 1];
      continue;
    }
    all[2 * k] = all[2 * i];
    all[2 * k + 1] = all[2 * i + 1];
    k++;
  }
  *parts = all;
  *np = k;
  return 0;
}

/* A finished copy's chunks held over [b, e), appended to *parts (*n pairs,
 * room for *cap). 0 or -ENOMEM. */
static int copy_held(struct ur_pread_mem *m, uint64_t b, uint64_t e, uint64_t **parts, size_t *n,
                     size_t *cap) {
  for (uint64_t pos = b; pos < e;) {
    uint64_t base = pos & ~(UR_CHUNK_SIZE - 1), next = base + UR_CHUNK_SIZE;
    uint64_t end = next < e && next > base ? next : e;
    if (!ur_mem_find(m, base)) {
      pos = end;
      continue;
    }
    if (ur_ranges_push(parts, n, cap, pos, end) < 0) return -ENOMEM;
    pos = end;
  }
  return 0;
}

int ur_reader_present(struct ur_reader *r, uint64_t addr, uint64_t len, uint64_t **parts,
                      size_t *n) {
  *parts = NULL;
  *n = 0;
  size_t cap = 0;
  if (!len || addr + len < addr) return 0;
  if (r->copy) return copy_held(r->copy, addr, addr + len, parts, n, &cap);
  uint64_t span[2] = {addr, addr + len};
  int rc = reader_pagemap(r) < 0 ? -ENOTTY : ur_present_pages(r->pagemap_fd, span, 1, parts, n);
  if (rc == 0 && r->cow) rc = with_sealed(r->cow, span, 1, parts, n);
  if (rc == 0) return 0;
  free(*parts);
  *parts = NULL;
  *n = 0;
  if (rc == -ENOMEM) return rc;
  /* No PAGEMAP_SCAN (before Linux 6.7) or no pagemap: all of it. */
  if (!(*parts = malloc(sizeof span))) return -ENOMEM;
  memcpy(*parts, span, sizeof span);
  *n = 1;
  return 0;
}

PyObject *ur_py_present_ranges(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *source;
  Py_buffer rb;
  if (!PyArg_ParseTuple(args, "Oy*", &source, &rb)) return NULL;
  PyObject *result = NULL;
  const uint64_t *in = rb.buf;
  size_t n = (size_t)rb.len / 16;
  if (rb.len % 16 || ((uintptr_t)rb.buf & 7)) {
    PyErr_SetString(PyExc_ValueError, "ranges must be packed u64 (begin, end) pairs");
    goto out;
  }
  int cow_pid = 0;
  struct ur_cow *cow = ur_memory_copy_cow(source, &cow_pid);
  if (cow) {
    source = NULL; /* the live process's pages and those the seal recorded */
  } else if (PyObject_TypeCheck(source, &ur_memory_copy_type)) {
    struct ur_pread_mem *m = ur_memory_copy_mem(source);
    if (!m) {
      PyErr_SetString(PyExc_ValueError, "the MemoryCopy is not finished, or closed");
      goto out;
    }
    PyObject *ba = PyByteArray_FromStringAndSize(NULL, 0);
    if (ba && held_parts(m, in, n, ba) == 0) result = PyBytes_FromObject(ba);
    Py_XDECREF(ba);
    goto out;
  }
  long pid = !source ? cow_pid : PyLong_Check(source) ? PyLong_AsLong(source) : -1;
  if (pid < 0 || pid > INT32_MAX) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "memory source must be a pid or a MemoryCopy");
    goto out;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/%ld/pagemap", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ur_py_raise(-(errno == ENOENT ? ESRCH : errno), "cannot open the process's pagemap");
    goto out;
  }
  uint64_t *parts = NULL;
  size_t np = 0;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = ur_present_pages(fd, in, n, &parts, &np);
  if (rc == 0 && cow) rc = with_sealed(cow, in, n, &parts, &np);
  Py_END_ALLOW_THREADS
  close(fd);
  if (rc == -ENOTTY || rc == -EINVAL) {
    result = PyBytes_FromStringAndSize(rb.buf, rb.len); /* no PAGEMAP_SCAN: all of it */
  } else if (rc < 0) {
    ur_py_raise(rc, "cannot read the process's pagemap");
  } else {
    result = PyBytes_FromStringAndSize((const char *)parts, (Py_ssize_t)(np * 16));
  }
  free(parts);
out:
  PyBuffer_Release(&rb);
  return result;
}

PyObject *ur_py_set_cache_budget(PyObject *Py_UNUSED(self), PyObject *args) {
  unsigned long long bytes;
  if (!PyArg_ParseTuple(args, "K", &bytes)) return NULL;
  ur_mem_set_budget(bytes);
  Py_RETURN_NONE;
}

PyObject *ur_py_cache_bound(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(args)) {
  return PyLong_FromUnsignedLongLong(ur_mem_cache_bound());
}
