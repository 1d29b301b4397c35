/* A read-only buffer over an array from alloc.h, handed to Python without a
 * copy: the registry's entries (tens of millions of them) would otherwise be
 * held twice while they are copied into bytes, 20 bytes per allocation more
 * at the scanner's peak. The mapping is unmapped when the last view of it
 * goes. */
#include "alloc.h"
#include "native.h"

typedef struct {
  PyObject_HEAD
  void *p; /* ur_big_calloc'd, owned */
  Py_ssize_t len;
} BigBuffer;

static int big_getbuffer(BigBuffer *self, Py_buffer *view, int flags) {
  static char empty[1];
  return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : empty, self->len, 1, flags);
}

static void big_dealloc(BigBuffer *self) {
  ur_big_free(self->p);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t big_length(BigBuffer *self) { return self->len; }

static PyBufferProcs big_as_buffer = {.bf_getbuffer = (getbufferproc)big_getbuffer};
static PySequenceMethods big_as_sequence = {.sq_length = (lenfunc)big_length};

PyTypeObject ur_big_buffer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "unreachable._native.BigBuffer",
    .tp_basicsize = sizeof(BigBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only bytes of a native array (a buffer: memoryview(b), bytes(b)).",
    .tp_dealloc = (destructor)big_dealloc,
    .tp_as_buffer = &big_as_buffer,
    .tp_as_sequence = &big_as_sequence,
};

PyObject *ur_big_buffer(void *p, size_t len) {
  BigBuffer *b = PyObject_New(BigBuffer, &ur_big_buffer_type);
  if (!b) {
    ur_big_free(p);
    return NULL;
  }
  b->p = p;
  b->len = (Py_ssize_t)len;
  return (PyObject *)b;
}
