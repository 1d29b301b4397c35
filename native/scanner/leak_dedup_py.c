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
  /* Tuples, not packed records: Python keeps no copy of the layout. */
  result = PyList_New(n);
  for (ssize_t i = 0; result && i < n; i++) {
    const struct ur_dedup_leak *l = &out[i];
    PyObject *t = Py_BuildValue("(KKKKKKKKK)", (unsigned long long)l->begin,
                                (unsigned long long)l->size, (unsigned long long)l->stack_id,
                                (unsigned long long)l->referenced_count,
                                (unsigned long long)l->referenced_size,
                                (unsigned long long)l->similar_count,
                                (unsigned long long)l->similar_size,
                                (unsigned long long)l->similar_referenced_count,
                                (unsigned long long)l->similar_referenced_size);
    if (!t) {
      Py_CLEAR(result);
      break;
    }
    PyList_SET_ITEM(result, i, t);
  }
  free(out);
done:
  PyBuffer_Release(&leaks);
  return result;
}
