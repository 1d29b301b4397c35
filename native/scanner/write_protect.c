/*
 * Write tracking armed from the scanner (write_tracking.py, abi.h
 * UR_TRACK_MODE_SCANNER): the target's helper opens the asynchronous
 * userfaultfd, the scanner takes it with pidfd_getfd and registers and
 * write-protects the target's mappings through it, and unregisters them at
 * the end. A userfaultfd's ioctls act on the memory of the process that
 * opened it, whoever calls them; PAGEMAP_SCAN on /proc/PID/pagemap walks
 * that process's page tables. Done here, those walks run in the scan's
 * scheduling group rather than as one of the target's threads, which took
 * the core of a busy thread of the target (docs/pause.md, "What the target
 * feels"). The rules are the helper's (native/shim/write_tracking.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "native.h"
#include "unreachable/write_protect.h"

PyObject *ur_py_track_arm(PyObject *Py_UNUSED(self), PyObject *args) {
  int uffd, pid;
  Py_buffer ranges;
  if (!PyArg_ParseTuple(args, "iiy*", &uffd, &pid, &ranges)) return NULL;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/pagemap", pid);
  int pagemap = open(path, O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) {
    PyBuffer_Release(&ranges);
    return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
  }
  const uint64_t *r = ranges.buf;
  size_t nr = (size_t)ranges.len / 24;
  unsigned long armed = 0;
  struct page_region vec[256];
  Py_BEGIN_ALLOW_THREADS
  for (size_t i = 0; i < nr; i++) {
    uint64_t lo = r[3 * i], hi = r[3 * i + 1];
    int anonymous = r[3 * i + 2] != 0;
    struct uffdio_register reg = {.range = {lo, hi - lo}, .mode = UFFDIO_REGISTER_MODE_WP};
    /* Refused (gone meanwhile, not a kind userfaultfd takes): untracked,
     * and the scan reads it again at the stop. */
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) continue;
    int rc;
    if (anonymous) {
      rc = ur_protect_present(pagemap, lo, hi, vec, sizeof vec / sizeof vec[0]);
    } else {
      /* A file's absent page is not zero: only a marker keeps it
       * protected once the scan's read faults it in. */
      struct uffdio_writeprotect wp = {.range = {lo, hi - lo},
                                       .mode = UFFDIO_WRITEPROTECT_MODE_WP};
      rc = ioctl(uffd, UFFDIO_WRITEPROTECT, &wp);
    }
    if (rc == 0)
      armed++;
    else
      ur_unregister_present(uffd, pagemap, lo, hi, vec, sizeof vec / sizeof vec[0]);
  }
  Py_END_ALLOW_THREADS
  close(pagemap);
  PyBuffer_Release(&ranges);
  return PyLong_FromUnsignedLong(armed);
}

PyObject *ur_py_track_disarm(PyObject *Py_UNUSED(self), PyObject *args) {
  int uffd, pid;
  Py_buffer ranges;
  if (!PyArg_ParseTuple(args, "iiy*", &uffd, &pid, &ranges)) return NULL;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/pagemap", pid);
  /* Without it (the target gone, or out of reach) every range goes in
   * pieces. */
  int pagemap = open(path, O_RDONLY | O_CLOEXEC);
  const uint64_t *r = ranges.buf;
  size_t nr = (size_t)ranges.len / 16;
  struct page_region vec[256];
  Py_BEGIN_ALLOW_THREADS
  for (size_t i = 0; i < nr; i++)
    ur_unregister_present(uffd, pagemap, r[2 * i], r[2 * i + 1], vec, sizeof vec / sizeof vec[0]);
  Py_END_ALLOW_THREADS
  if (pagemap >= 0) close(pagemap);
  PyBuffer_Release(&ranges);
  Py_RETURN_NONE;
}
