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
#include "unreachable/linux_compat.h"

/* As in the helper: each walk over the page tables holds the target's mmap
 * lock (for writing while unregistering), so it is let go every 8 MiB. */
#define WALK_CHUNK ((uint64_t)8 << 20)

/* Only the pages that exist, as the helper does (write_tracking.c
 * protect_present says why); the output vector keeps the kernel off its
 * fast path that marks absent pages. */
static int protect_present(int pagemap, uint64_t lo, uint64_t hi) {
  struct page_region vec[256];
  for (uint64_t pos = lo; pos < hi;) {
    struct pm_scan_arg a = {
        .size = sizeof(a),
        .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
        .start = pos,
        .end = hi - pos > WALK_CHUNK ? pos + WALK_CHUNK : hi,
        .vec = (uint64_t)(uintptr_t)vec,
        .vec_len = sizeof vec / sizeof vec[0],
        .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        .return_mask = PAGE_IS_PRESENT,
    };
    if (ioctl(pagemap, PAGEMAP_SCAN, &a) < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (a.walk_end <= pos) return -1;
    pos = a.walk_end;
  }
  return 0;
}

static void unregister(int uffd, uint64_t lo, uint64_t hi) {
  for (uint64_t pos = lo; pos < hi; pos += WALK_CHUNK) {
    struct uffdio_range range = {pos, hi - pos > WALK_CHUNK ? WALK_CHUNK : hi - pos};
    ioctl(uffd, UFFDIO_UNREGISTER, &range);
  }
}

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
      rc = protect_present(pagemap, lo, hi);
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
      unregister(uffd, lo, hi);
  }
  Py_END_ALLOW_THREADS
  close(pagemap);
  PyBuffer_Release(&ranges);
  return PyLong_FromUnsignedLong(armed);
}

PyObject *ur_py_track_disarm(PyObject *Py_UNUSED(self), PyObject *args) {
  int uffd;
  Py_buffer ranges;
  if (!PyArg_ParseTuple(args, "iy*", &uffd, &ranges)) return NULL;
  const uint64_t *r = ranges.buf;
  size_t nr = (size_t)ranges.len / 16;
  Py_BEGIN_ALLOW_THREADS
  for (size_t i = 0; i < nr; i++) unregister(uffd, r[2 * i], r[2 * i + 1]);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&ranges);
  Py_RETURN_NONE;
}
