/* unreachable._native: method table and type registration only. */
#include "native.h"

static PyMethodDef methods[] = {
    {"read_registry", ur_py_read_registry, METH_VARARGS,
     "read_registry(mem_pid, descriptor_addr, entries=True) -> dict\n\n"
     "Read the shim's allocation registry (abi.h) out of mem_pid's memory; without "
     "entries, only threads, shards and options (allocs and stack_ids empty)."},
    {"read_stacks", ur_py_read_stacks, METH_VARARGS,
     "read_stacks(mem_pid, descriptor_addr, ids) -> dict[int, tuple[int, ...]]\n\n"
     "Program counters of each stack id (ids: packed u32)."},
    {"sweep", (PyCFunction)(void (*)(void))ur_py_sweep, METH_VARARGS | METH_KEYWORDS,
     "sweep(mem_pid, allocs, root_ranges, root_values, *, stack_ids=b'', excluded=b'', "
     "cache_mb=0) -> dict\n\n"
     "Mark from the roots, then fold the unreachable allocations into leaks (abi.h "
     "ur_leak_record); excluded block addresses are neither counted nor reported."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_native",
    "Native core of the unreachable scanner: stop, snapshot, read and sweep a process.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
  if (PyType_Ready(&ur_session_type) < 0) return NULL;
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  Py_INCREF(&ur_session_type);
  if (PyModule_AddObject(m, "Session", (PyObject *)&ur_session_type) < 0) {
    Py_DECREF(&ur_session_type);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
