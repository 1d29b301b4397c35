/* The pin gate (pin_gate.h) for a stop this process does not hold: the
 * stopper's (native/stopper), whose whole copy is read from here. Python
 * opens it once the stopper says every thread is stopped and shuts it
 * before asking for the release: the gate only knows what it is told. */
#include "native.h"
#include "pin_gate.h"

PyObject *ur_py_pin_open(PyObject *self, PyObject *args) {
  (void)self;
  int pid;
  if (!PyArg_ParseTuple(args, "i", &pid)) return NULL;
  ur_pin_allow(pid);
  Py_RETURN_NONE;
}

PyObject *ur_py_pin_shut(PyObject *self, PyObject *args) {
  (void)self;
  int pid;
  if (!PyArg_ParseTuple(args, "i", &pid)) return NULL;
  /* Waits out the reads already past the gate: not with the GIL held, as
   * a copy thread of this process may need it to finish. */
  Py_BEGIN_ALLOW_THREADS
  ur_pin_forbid(pid);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}
