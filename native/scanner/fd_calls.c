/* The two descriptor calls capture/in_flight.py needs that Python's os
 * module lacks (pidfd_getfd, tee). Here rather than through ctypes: ctypes
 * and its libffi were ~2 ms of every scan's imports, for two system calls. */
#include "native.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438 /* the same number on every architecture */
#endif

PyObject *ur_py_pidfd_getfd(PyObject *self, PyObject *args) {
  (void)self;
  int pidfd, fd;
  if (!PyArg_ParseTuple(args, "ii", &pidfd, &fd)) return NULL;
  long r = syscall(SYS_pidfd_getfd, pidfd, fd, 0);
  if (r < 0) return PyErr_SetFromErrno(PyExc_OSError);
  return PyLong_FromLong(r);
}

PyObject *ur_py_tee(PyObject *self, PyObject *args) {
  (void)self;
  int fd_in, fd_out;
  Py_ssize_t len;
  unsigned int flags;
  if (!PyArg_ParseTuple(args, "iinI", &fd_in, &fd_out, &len, &flags)) return NULL;
  if (len < 0) {
    PyErr_SetString(PyExc_ValueError, "tee: negative length");
    return NULL;
  }
  ssize_t n = tee(fd_in, fd_out, (size_t)len, flags);
  if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
  return PyLong_FromSsize_t(n);
}
