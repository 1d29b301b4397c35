/* Pointers a JIT compiled into its code. An instruction's immediate lies at
 * any byte offset (x86-64's movabs: a HotSpot inline cache holds its
 * CompiledICHolder so), where the sweep, which reads aligned words, never
 * looks. */
#include <string.h>

#include "native.h"

PyObject *ur_py_code_words(PyObject *Py_UNUSED(self), PyObject *args) {
  Py_buffer code;
  unsigned long long lo, hi;
  if (!PyArg_ParseTuple(args, "y*KK", &code, &lo, &hi)) return NULL;
  const unsigned char *p = code.buf;
  size_t n = (size_t)code.len, count = 0, cap = 64;
  uint64_t *out = PyMem_Malloc(cap * sizeof *out);
  if (!out) {
    PyBuffer_Release(&code);
    return PyErr_NoMemory();
  }
  for (size_t i = 0; i + 8 <= n; i++) {
    if (i % 8 == 0) continue; /* aligned: a root range already */
    uint64_t v;
    memcpy(&v, p + i, 8);
    if (v < lo || v >= hi) continue;
    if (count == cap) {
      uint64_t *grown = PyMem_Realloc(out, 2 * cap * sizeof *out);
      if (!grown) {
        PyMem_Free(out);
        PyBuffer_Release(&code);
        return PyErr_NoMemory();
      }
      out = grown;
      cap *= 2;
    }
    out[count++] = v;
  }
  PyBuffer_Release(&code);
  PyObject *r = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(count * sizeof *out));
  PyMem_Free(out);
  return r;
}
