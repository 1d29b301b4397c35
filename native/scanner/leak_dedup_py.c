/* _native.dedup: the Python face of leak_dedup.c. */
#include "leak_dedup.h"
#include "native.h"

PyObject *ur_py_dedup(PyObject *Py_UNUSED(self), PyObject *args) {
  Py_buffer leaks;
  Py_ssize_t limit;
  if (!PyArg_ParseTuple(args, "y*n", &leaks, &limit)) return NULL;
  PyObject *result = NULL;
  if (leaks.len % (Py_ssize_t)sizeof(struct ur_leak_record) || limit < 0) {
    PyErr_SetString(PyExc_ValueError, "dedup: leaks must be whole leak records, limit >= 0");
    goto done;
  }
  struct ur_dedup_leak *out;
  ssize_t n;
  Py_BEGIN_ALLOW_THREADS;
  n = ur_leak_dedup(leaks.buf, (size_t)leaks.len / sizeof(struct ur_leak_record), (size_t)limit,
                    &out);
  Py_END_ALLOW_THREADS;
  if (n < 0) {
    ur_py_raise((int)n, "dedup: out of memory");
    goto done;
  }
  result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)((size_t)n * sizeof(*out)));
  free(out);
done:
  PyBuffer_Release(&leaks);
  return result;
}
