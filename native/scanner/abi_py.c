/* _native's view of abi.h: the structures Python reads or writes, decoded and
 * encoded by name with offsetof/sizeof, and the constants it needs. Python
 * holds no layout of its own: a field added to abi.h is added to a table
 * here, and nothing in unreachable/ mirrors an offset or a struct format.
 * The mark's graph-mode records (native/mark/retention.h) and the kernel's
 * user_regs_struct (<sys/user.h>) are here too, for the same reason. */
#include <string.h>
#include <sys/user.h>

#include "native.h"
#include "page_sync.h"
#include "retention.h"
#include "unreachable/abi.h"

enum abi_kind { ABI_U32, ABI_I32, ABI_U64, ABI_I64, ABI_BYTES, ABI_U64S /* uint64_t[N], a list */ };

struct abi_field {
  const char *name;
  size_t offset, size;
  enum abi_kind kind;
};

#define FIELD(s, f, k) {#f, offsetof(struct s, f), sizeof(((struct s *)0)->f), k}

static const struct abi_field descriptor_fields[] = {
    FIELD(ur_descriptor, magic, ABI_U64),
    FIELD(ur_descriptor, version, ABI_U32),
    FIELD(ur_descriptor, size, ABI_U32),
    FIELD(ur_descriptor, enabled, ABI_U32),
    FIELD(ur_descriptor, num_shards, ABI_U32),
    FIELD(ur_descriptor, shards, ABI_U64),
    FIELD(ur_descriptor, threads, ABI_U64),
    FIELD(ur_descriptor, max_threads, ABI_U32),
    FIELD(ur_descriptor, helper_tid, ABI_U32),
    FIELD(ur_descriptor, helper_cmd, ABI_U64),
    FIELD(ur_descriptor, stacks, ABI_U64),
    FIELD(ur_descriptor, region_begin, ABI_U64),
    FIELD(ur_descriptor, region_end, ABI_U64),
    FIELD(ur_descriptor, options, ABI_U64),
    FIELD(ur_descriptor, pid, ABI_U64),
    FIELD(ur_descriptor, child_box, ABI_U64),
    FIELD(ur_descriptor, write_tracker, ABI_U64),
    FIELD(ur_descriptor, altstacks, ABI_U64),
    FIELD(ur_descriptor, num_altstacks, ABI_U64),
    FIELD(ur_descriptor, size_maps, ABI_U64),
    FIELD(ur_descriptor, modules, ABI_U64),
    FIELD(ur_descriptor, regions, ABI_U64),
    FIELD(ur_descriptor, num_regions, ABI_U64),
    FIELD(ur_descriptor, disabled, ABI_U32),
    FIELD(ur_descriptor, disabled_errno, ABI_I32),
    FIELD(ur_descriptor, unregistered, ABI_U64),
    FIELD(ur_descriptor, helper_frames, ABI_U64),
    FIELD(ur_descriptor, shard_locks, ABI_U64),
    FIELD(ur_descriptor, no_helper, ABI_U32),
};

static const struct abi_field write_tracker_fields[] = {
    FIELD(ur_write_tracker, cmd, ABI_U32),
    FIELD(ur_write_tracker, error, ABI_I32),
    FIELD(ur_write_tracker, scanner_pid, ABI_U32),
    FIELD(ur_write_tracker, ranges, ABI_U32),
    FIELD(ur_write_tracker, heartbeat, ABI_U64),
    FIELD(ur_write_tracker, reserved, ABI_U64),
};

static const struct abi_field child_index_fields[] = {
    FIELD(ur_child_index, entries, ABI_U64),
    FIELD(ur_child_index, allocation_count, ABI_U64),
    FIELD(ur_child_index, allocation_bytes, ABI_U64),
    FIELD(ur_child_index, overlapping, ABI_U64),
    FIELD(ur_child_index, index_ns, ABI_U64),
    FIELD(ur_child_index, features, ABI_U64),
};

static const struct abi_field sweep_req_fields[] = {
    FIELD(ur_child_sweep_req, nranges, ABI_U64),
    FIELD(ur_child_sweep_req, nvalues, ABI_U64),
    FIELD(ur_child_sweep_req, nexcluded, ABI_U64),
    FIELD(ur_child_sweep_req, nreadable, ABI_U64),
};

static const struct abi_field sweep_opts_fields[] = {
    FIELD(ur_child_sweep_opts, threads, ABI_U64),
};

static const struct abi_field sweep_reply_fields[] = {
    FIELD(ur_child_sweep_reply, unreachable_count, ABI_U64),
    FIELD(ur_child_sweep_reply, unreachable_bytes, ABI_U64),
    FIELD(ur_child_sweep_reply, bytes_scanned, ABI_U64),
    FIELD(ur_child_sweep_reply, pages_skipped, ABI_U64),
    FIELD(ur_child_sweep_reply, mark_ns, ABI_U64),
    FIELD(ur_child_sweep_reply, fold_ns, ABI_U64),
    FIELD(ur_child_sweep_reply, nleaks, ABI_U64),
    FIELD(ur_child_sweep_reply, bounced_pages, ABI_U64),
};

static const struct abi_field leak_record_fields[] = {
    FIELD(ur_leak_record, begin, ABI_U64),
    FIELD(ur_leak_record, size, ABI_U64),
    FIELD(ur_leak_record, referenced_count, ABI_U64),
    FIELD(ur_leak_record, referenced_size, ABI_U64),
    FIELD(ur_leak_record, stack_id, ABI_U32),
};

static const struct abi_field lmu_header_fields[] = {
    FIELD(ur_lmu_header, magic, ABI_U64),
    FIELD(ur_lmu_header, version, ABI_U32),
    FIELD(ur_lmu_header, leak_size, ABI_U32),
    FIELD(ur_lmu_header, leak_count, ABI_U64),
    FIELD(ur_lmu_header, leak_bytes, ABI_U64),
    FIELD(ur_lmu_header, allocation_count, ABI_U64),
    FIELD(ur_lmu_header, allocation_bytes, ABI_U64),
    FIELD(ur_lmu_header, entries, ABI_U64),
    FIELD(ur_lmu_header, text_length, ABI_U64),
};

static const struct abi_field lmu_leak_fields[] = {
    FIELD(ur_lmu_leak, begin, ABI_U64),
    FIELD(ur_lmu_leak, size, ABI_U64),
    FIELD(ur_lmu_leak, referenced_count, ABI_U64),
    FIELD(ur_lmu_leak, referenced_size, ABI_U64),
    FIELD(ur_lmu_leak, similar_count, ABI_U64),
    FIELD(ur_lmu_leak, similar_size, ABI_U64),
    FIELD(ur_lmu_leak, similar_referenced_count, ABI_U64),
    FIELD(ur_lmu_leak, similar_referenced_size, ABI_U64),
    FIELD(ur_lmu_leak, total_size, ABI_U64),
    FIELD(ur_lmu_leak, contents_length, ABI_U32),
    FIELD(ur_lmu_leak, num_frames, ABI_U32),
    FIELD(ur_lmu_leak, contents, ABI_BYTES),
    FIELD(ur_lmu_leak, frames, ABI_U64S),
};

static const struct abi_field altstack_fields[] = {
    FIELD(ur_altstack, tid, ABI_U32),
    FIELD(ur_altstack, sp, ABI_U64),
    FIELD(ur_altstack, size, ABI_U64),
};

static const struct abi_field module_fields[] = {
    FIELD(ur_module, bias, ABI_U64),
    FIELD(ur_module, start, ABI_U64),
    FIELD(ur_module, end, ABI_U64),
    FIELD(ur_module, path, ABI_U32),
    FIELD(ur_module, path_len, ABI_U32),
    FIELD(ur_module, build_id_len, ABI_U32),
    FIELD(ur_module, build_id, ABI_BYTES),
};

static const struct abi_field module_table_fields[] = {
    FIELD(ur_module_table, modules, ABI_U64),
    FIELD(ur_module_table, strings, ABI_U64),
    FIELD(ur_module_table, capacity, ABI_U32),
    FIELD(ur_module_table, count, ABI_U32),
    FIELD(ur_module_table, strings_size, ABI_U32),
    FIELD(ur_module_table, lost, ABI_U32),
};

static const struct abi_field range_fields[] = {
    FIELD(ur_range, begin, ABI_U64),
    FIELD(ur_range, end, ABI_U64),
};

static const struct abi_field block_fields[] = {
    FIELD(ur_block, begin, ABI_U64),
    FIELD(ur_block, size, ABI_U64),
};

static const struct abi_field layout_span_fields[] = {
    FIELD(ur_layout_span, begin, ABI_U64),
    FIELD(ur_layout_span, end, ABI_U64),
    FIELD(ur_layout_span, demand_zero, ABI_U64),
};

static const struct abi_field sync_range_fields[] = {
    FIELD(ur_sync_range, begin, ABI_U64),
    FIELD(ur_sync_range, end, ABI_U64),
    FIELD(ur_sync_range, flags, ABI_U64),
};

static const struct abi_field root_hit_fields[] = {
    FIELD(ur_root_hit, where, ABI_U64),
    FIELD(ur_root_hit, value, ABI_U64),
    FIELD(ur_root_hit, region, ABI_U32),
    FIELD(ur_root_hit, block, ABI_U32),
};

static const struct abi_field root_region_fields[] = {
    FIELD(ur_root_region, begin, ABI_U64),
    FIELD(ur_root_region, end, ABI_U64),
    FIELD(ur_root_region, region, ABI_U64),
};

static const struct abi_field root_site_fields[] = {
    FIELD(ur_root_site, top, ABI_I64),
    FIELD(ur_root_site, key, ABI_I64),
    FIELD(ur_root_site, bytes, ABI_U64),
    FIELD(ur_root_site, count, ABI_U64),
};

static const struct abi_field site_total_fields[] = {
    FIELD(ur_site_total, key, ABI_I64),
    FIELD(ur_site_total, bytes, ABI_U64),
    FIELD(ur_site_total, count, ABI_U64),
    FIELD(ur_site_total, retained_bytes, ABI_U64),
    FIELD(ur_site_total, retained_count, ABI_U64),
    FIELD(ur_site_total, largest, ABI_U64),
};

static const struct abi_field site_holder_fields[] = {
    FIELD(ur_site_holder, key, ABI_I64),
    FIELD(ur_site_holder, top, ABI_I64),
    FIELD(ur_site_holder, bytes, ABI_U64),
    FIELD(ur_site_holder, count, ABI_U64),
};

/* NT_PRSTATUS's registers, in the kernel's order (x86-64). */
static const struct abi_field user_regs_fields[] = {
    FIELD(user_regs_struct, r15, ABI_U64),     FIELD(user_regs_struct, r14, ABI_U64),
    FIELD(user_regs_struct, r13, ABI_U64),     FIELD(user_regs_struct, r12, ABI_U64),
    FIELD(user_regs_struct, rbp, ABI_U64),     FIELD(user_regs_struct, rbx, ABI_U64),
    FIELD(user_regs_struct, r11, ABI_U64),     FIELD(user_regs_struct, r10, ABI_U64),
    FIELD(user_regs_struct, r9, ABI_U64),      FIELD(user_regs_struct, r8, ABI_U64),
    FIELD(user_regs_struct, rax, ABI_U64),     FIELD(user_regs_struct, rcx, ABI_U64),
    FIELD(user_regs_struct, rdx, ABI_U64),     FIELD(user_regs_struct, rsi, ABI_U64),
    FIELD(user_regs_struct, rdi, ABI_U64),     FIELD(user_regs_struct, orig_rax, ABI_U64),
    FIELD(user_regs_struct, rip, ABI_U64),     FIELD(user_regs_struct, cs, ABI_U64),
    FIELD(user_regs_struct, eflags, ABI_U64),  FIELD(user_regs_struct, rsp, ABI_U64),
    FIELD(user_regs_struct, ss, ABI_U64),      FIELD(user_regs_struct, fs_base, ABI_U64),
    FIELD(user_regs_struct, gs_base, ABI_U64), FIELD(user_regs_struct, ds, ABI_U64),
    FIELD(user_regs_struct, es, ABI_U64),      FIELD(user_regs_struct, fs, ABI_U64),
    FIELD(user_regs_struct, gs, ABI_U64),
};

struct abi_struct {
  const char *name;
  size_t size;
  const struct abi_field *fields;
  size_t nfields;
};

#define STRUCT(s, t) {#s, sizeof(struct s), t, sizeof(t) / sizeof(t[0])}

static const struct abi_struct structs[] = {
    STRUCT(ur_descriptor, descriptor_fields),
    STRUCT(ur_write_tracker, write_tracker_fields),
    STRUCT(ur_child_index, child_index_fields),
    STRUCT(ur_child_sweep_req, sweep_req_fields),
    STRUCT(ur_child_sweep_opts, sweep_opts_fields),
    STRUCT(ur_child_sweep_reply, sweep_reply_fields),
    STRUCT(ur_leak_record, leak_record_fields),
    STRUCT(ur_altstack, altstack_fields),
    STRUCT(ur_module, module_fields),
    STRUCT(ur_module_table, module_table_fields),
    STRUCT(ur_lmu_header, lmu_header_fields),
    STRUCT(ur_lmu_leak, lmu_leak_fields),
    STRUCT(ur_range, range_fields),
    STRUCT(ur_block, block_fields),
    STRUCT(ur_layout_span, layout_span_fields),
    STRUCT(ur_sync_range, sync_range_fields),
    STRUCT(ur_root_hit, root_hit_fields),
    STRUCT(ur_root_region, root_region_fields),
    STRUCT(ur_root_site, root_site_fields),
    STRUCT(ur_site_total, site_total_fields),
    STRUCT(ur_site_holder, site_holder_fields),
    STRUCT(user_regs_struct, user_regs_fields),
};

static const struct abi_struct *find_struct(const char *name) {
  for (size_t i = 0; i < sizeof(structs) / sizeof(structs[0]); i++)
    if (!strcmp(structs[i].name, name)) return &structs[i];
  PyErr_Format(PyExc_ValueError, "abi.h has no struct %s known to _native", name);
  return NULL;
}

static const struct abi_field *find_field(const struct abi_struct *s, const char *name) {
  for (size_t i = 0; i < s->nfields; i++)
    if (!strcmp(s->fields[i].name, name)) return &s->fields[i];
  PyErr_Format(PyExc_ValueError, "struct %s has no field %s", s->name, name);
  return NULL;
}

/* One structure at p (s->size readable bytes) as a dict of its named fields. */
static PyObject *decode_one(const struct abi_struct *s, const unsigned char *p) {
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  for (size_t i = 0; i < s->nfields; i++) {
    const struct abi_field *f = &s->fields[i];
    const unsigned char *at = p + f->offset;
    PyObject *v;
    if (f->kind == ABI_U32) {
      uint32_t x;
      memcpy(&x, at, sizeof(x));
      v = PyLong_FromUnsignedLong(x);
    } else if (f->kind == ABI_I32) {
      int32_t x;
      memcpy(&x, at, sizeof(x));
      v = PyLong_FromLong(x);
    } else if (f->kind == ABI_U64) {
      uint64_t x;
      memcpy(&x, at, sizeof(x));
      v = PyLong_FromUnsignedLongLong(x);
    } else if (f->kind == ABI_I64) {
      int64_t x;
      memcpy(&x, at, sizeof(x));
      v = PyLong_FromLongLong(x);
    } else if (f->kind == ABI_U64S) {
      v = PyList_New((Py_ssize_t)(f->size / sizeof(uint64_t)));
      for (size_t k = 0; v && k < f->size / sizeof(uint64_t); k++) {
        uint64_t x;
        memcpy(&x, at + k * sizeof(x), sizeof(x));
        PyObject *item = PyLong_FromUnsignedLongLong(x);
        if (!item) Py_CLEAR(v);
        else PyList_SET_ITEM(v, (Py_ssize_t)k, item);
      }
    } else {
      v = PyBytes_FromStringAndSize((const char *)at, (Py_ssize_t)f->size);
    }
    if (!v || PyDict_SetItemString(d, f->name, v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

/* value into the field at p; -1 with an exception set if it does not fit. */
static int encode_u64s(const struct abi_field *f, PyObject *value, unsigned char *p) {
  PyObject *seq = PySequence_Fast(value, "a list of integers");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  int rc = 0;
  if ((size_t)n > f->size / sizeof(uint64_t)) {
    PyErr_Format(PyExc_ValueError, "%s: at most %zu values", f->name, f->size / sizeof(uint64_t));
    rc = -1;
  }
  for (Py_ssize_t k = 0; rc == 0 && k < n; k++) {
    unsigned long long x = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, k));
    if (x == (unsigned long long)-1 && PyErr_Occurred()) rc = -1;
    uint64_t v = x;
    if (rc == 0) memcpy(p + f->offset + (size_t)k * sizeof(v), &v, sizeof(v));
  }
  Py_DECREF(seq);
  return rc;
}

static int encode_field(const struct abi_field *f, PyObject *value, unsigned char *p) {
  if (f->kind == ABI_U64S) return encode_u64s(f, value, p);
  if (f->kind == ABI_BYTES) {
    Py_buffer b;
    if (PyObject_GetBuffer(value, &b, PyBUF_SIMPLE) < 0) return -1;
    int ok = (size_t)b.len <= f->size;
    if (ok) memcpy(p + f->offset, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    if (!ok) PyErr_Format(PyExc_ValueError, "%s: at most %zu bytes", f->name, f->size);
    return ok ? 0 : -1;
  }
  if (f->kind == ABI_I64) {
    long long x = PyLong_AsLongLong(value);
    if (x == -1 && PyErr_Occurred()) return -1;
    int64_t v = x;
    memcpy(p + f->offset, &v, sizeof(v));
    return 0;
  }
  if (f->kind == ABI_I32) {
    long x = PyLong_AsLong(value);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < INT32_MIN || x > INT32_MAX) goto range;
    int32_t v = (int32_t)x;
    memcpy(p + f->offset, &v, sizeof(v));
    return 0;
  }
  unsigned long long x = PyLong_AsUnsignedLongLong(value);
  if (x == (unsigned long long)-1 && PyErr_Occurred()) return -1;
  if (f->kind == ABI_U32) {
    if (x > UINT32_MAX) goto range;
    uint32_t v = (uint32_t)x;
    memcpy(p + f->offset, &v, sizeof(v));
  } else {
    uint64_t v = x;
    memcpy(p + f->offset, &v, sizeof(v));
  }
  return 0;
range:
  PyErr_Format(PyExc_OverflowError, "%s does not fit in %zu bytes", f->name, f->size);
  return -1;
}

static PyObject *abi_decode(PyObject *Py_UNUSED(self), PyObject *args) {
  const char *name;
  Py_buffer raw;
  if (!PyArg_ParseTuple(args, "sy*", &name, &raw)) return NULL;
  PyObject *result = NULL;
  const struct abi_struct *s = find_struct(name);
  if (s && (size_t)raw.len < s->size)
    PyErr_Format(PyExc_ValueError, "struct %s is %zu bytes, got %zd", name, s->size, raw.len);
  else if (s)
    result = decode_one(s, raw.buf);
  PyBuffer_Release(&raw);
  return result;
}

static PyObject *abi_decode_array(PyObject *Py_UNUSED(self), PyObject *args) {
  const char *name;
  Py_buffer raw;
  if (!PyArg_ParseTuple(args, "sy*", &name, &raw)) return NULL;
  PyObject *result = NULL;
  const struct abi_struct *s = find_struct(name);
  if (!s) goto out;
  size_t n = (size_t)raw.len / s->size;
  if (!(result = PyList_New((Py_ssize_t)n))) goto out;
  for (size_t i = 0; i < n; i++) {
    PyObject *d = decode_one(s, (const unsigned char *)raw.buf + i * s->size);
    if (!d) {
      Py_CLEAR(result);
      goto out;
    }
    PyList_SET_ITEM(result, (Py_ssize_t)i, d);
  }
out:
  PyBuffer_Release(&raw);
  return result;
}

static PyObject *abi_encode(PyObject *Py_UNUSED(self), PyObject *args) {
  const char *name;
  PyObject *fields;
  if (!PyArg_ParseTuple(args, "sO!", &name, &PyDict_Type, &fields)) return NULL;
  const struct abi_struct *s = find_struct(name);
  if (!s) return NULL;
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)s->size);
  if (!out) return NULL;
  unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
  memset(p, 0, s->size); /* fields not given, reserved words included, are 0 */
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(fields, &pos, &key, &value)) {
    const char *fname = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    const struct abi_field *f = fname ? find_field(s, fname) : NULL;
    if (!fname && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "field names are str");
    if (!f || encode_field(f, value, p) < 0) {
      Py_DECREF(out);
      return NULL;
    }
  }
  return out;
}

/* One row (a sequence of the struct's fields in order) into p. */
static int encode_row(const struct abi_struct *s, PyObject *row, unsigned char *p) {
  PyObject *seq = PySequence_Fast(row, "each row is a sequence of the struct's fields");
  if (!seq) return -1;
  int rc = 0;
  if ((size_t)PySequence_Fast_GET_SIZE(seq) != s->nfields) {
    PyErr_Format(PyExc_ValueError, "a row of struct %s has %zu fields, got %zd", s->name,
                 s->nfields, PySequence_Fast_GET_SIZE(seq));
    rc = -1;
  }
  for (size_t i = 0; rc == 0 && i < s->nfields; i++)
    rc = encode_field(&s->fields[i], PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i), p);
  Py_DECREF(seq);
  return rc;
}

static PyObject *abi_encode_array(PyObject *Py_UNUSED(self), PyObject *args) {
  const char *name;
  PyObject *rows;
  if (!PyArg_ParseTuple(args, "sO", &name, &rows)) return NULL;
  const struct abi_struct *s = find_struct(name);
  PyObject *seq = s ? PySequence_Fast(rows, "rows must be iterable") : NULL;
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)s->size);
  if (out) {
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    memset(p, 0, (size_t)n * s->size); /* reserved words and padding are 0 */
    for (Py_ssize_t i = 0; i < n; i++)
      if (encode_row(s, PySequence_Fast_GET_ITEM(seq, i), p + (size_t)i * s->size) < 0) {
        Py_CLEAR(out);
        break;
      }
  }
  Py_DECREF(seq);
  return out;
}

static PyObject *abi_fields(PyObject *Py_UNUSED(self), PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  const struct abi_struct *s = find_struct(name);
  PyObject *out = s ? PyList_New((Py_ssize_t)s->nfields) : NULL;
  for (size_t i = 0; out && i < s->nfields; i++) {
    const struct abi_field *f = &s->fields[i];
    PyObject *t = Py_BuildValue("(snn)", f->name, (Py_ssize_t)f->offset, (Py_ssize_t)f->size);
    if (!t) Py_CLEAR(out);
    else PyList_SET_ITEM(out, (Py_ssize_t)i, t);
  }
  return out;
}

static PyObject *abi_field(PyObject *Py_UNUSED(self), PyObject *args) {
  const char *name, *fname;
  if (!PyArg_ParseTuple(args, "ss", &name, &fname)) return NULL;
  const struct abi_struct *s = find_struct(name);
  const struct abi_field *f = s ? find_field(s, fname) : NULL;
  if (!f) return NULL;
  return Py_BuildValue("(nn)", (Py_ssize_t)f->offset, (Py_ssize_t)f->size);
}

static PyObject *abi_sizeof(PyObject *Py_UNUSED(self), PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  const struct abi_struct *s = find_struct(name);
  return s ? PyLong_FromSize_t(s->size) : NULL;
}

PyMethodDef ur_abi_methods[] = {
    {"abi_decode", abi_decode, METH_VARARGS,
     "abi_decode(struct, raw) -> dict\n\n"
     "The named fields of abi.h's `struct` (e.g. 'ur_descriptor') at the start of raw; "
     "reserved words are left out, byte arrays are bytes. ValueError if raw is short."},
    {"abi_decode_array", abi_decode_array, METH_VARARGS,
     "abi_decode_array(struct, raw) -> list[dict]\n\n"
     "As abi_decode, for each whole `struct` in raw (a partial one at the end is ignored)."},
    {"abi_encode", abi_encode, METH_VARARGS,
     "abi_encode(struct, fields) -> bytes\n\n"
     "One `struct` with the fields given by name, every other byte 0."},
    {"abi_encode_array", abi_encode_array, METH_VARARGS,
     "abi_encode_array(struct, rows) -> bytes\n\n"
     "`struct`s packed back to back, each from a row of its fields' values in order."},
    {"abi_fields", abi_fields, METH_VARARGS,
     "abi_fields(struct) -> list[(field, offset, size)]\n\nThe decoded fields, in order."},
    {"abi_field", abi_field, METH_VARARGS,
     "abi_field(struct, field) -> (offset, size)\n\nWhere a field lies in its struct."},
    {"abi_sizeof", abi_sizeof, METH_VARARGS, "abi_sizeof(struct) -> int"},
    {NULL, NULL, 0, NULL},
};

int ur_abi_add_constants(PyObject *m) {
  static const struct {
    const char *name;
    unsigned long long value;
  } constants[] = {
      {"ABI_MAGIC", UR_ABI_MAGIC},
      {"ABI_VERSION", UR_ABI_VERSION},
      {"THREAD_FREE", UR_THREAD_FREE},
      {"THREAD_LIVE", UR_THREAD_LIVE},
      {"THREAD_EXITED", UR_THREAD_EXITED},
      {"DISABLED_NONE", UR_DISABLED_NONE},
      {"DISABLED_OPTIONS", UR_DISABLED_OPTIONS},
      {"DISABLED_NO_MEMORY", UR_DISABLED_NO_MEMORY},
      {"DISABLED_OTHER_MALLOC", UR_DISABLED_OTHER_MALLOC},
      {"NO_HELPER_OWN_FILTER", UR_NO_HELPER_OWN_FILTER},
      {"NO_HELPER_RAW_CLONE", UR_NO_HELPER_RAW_CLONE},
      {"TRACK_IDLE", UR_TRACK_IDLE},
      {"TRACK_START", UR_TRACK_START},
      {"TRACK_ON", UR_TRACK_ON},
      {"TRACK_STOP", UR_TRACK_STOP},
      {"TRACK_FAILED", UR_TRACK_FAILED},
      {"TRACK_MODE_COW", UR_TRACK_MODE_COW},
      {"TRACK_MODE_SCANNER", UR_TRACK_MODE_SCANNER},
      {"TRACK_HEARTBEAT_MS", UR_TRACK_HEARTBEAT_MS},
      {"CHILD_REQ_HOLDS", UR_CHILD_REQ_HOLDS},
      {"CHILD_REQ_SWEEP", UR_CHILD_REQ_SWEEP},
      {"CHILD_REQ_EXIT", UR_CHILD_REQ_EXIT},
      {"CHILD_REQ_BLOCKS", UR_CHILD_REQ_BLOCKS},
      {"CHILD_FEATURE_TEAM", UR_CHILD_FEATURE_TEAM},
      {"CHILD_FEATURE_TEAM_SIZE", UR_CHILD_FEATURE_TEAM_SIZE},
      {"CHILD_FEATURE_BLOCKS", UR_CHILD_FEATURE_BLOCKS},
      {"CHILD_FEATURE_OWNED", UR_CHILD_FEATURE_OWNED},
      {"CHILD_MAX_THREADS", UR_CHILD_MAX_THREADS},
      {"LMU_MAGIC", UR_LMU_MAGIC},
      {"LMU_VERSION", UR_LMU_VERSION},
      {"LMU_CONTENTS_BYTES", UR_LMU_CONTENTS_BYTES},
      {"LMU_MAX_FRAMES", UR_LMU_MAX_FRAMES},
  };
  for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(constants[i].value);
    int rc = v ? PyModule_AddObjectRef(m, constants[i].name, v) : -1;
    Py_XDECREF(v);
    if (rc < 0) return -1;
  }
  return PyModule_AddStringConstant(m, "DESCRIPTOR_SYMBOL", UR_DESCRIPTOR_SYMBOL);
}
