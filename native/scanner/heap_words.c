/* The words of memory read from a target that may point into its heap.
 * Memory a fork snapshot lacks (kept_out_of_fork.py) is read in the pause
 * and sent to the sweep as root values, each one looked up on its own: node's
 * V8 heap is ~12M words for 96 MiB, nearly all of them V8's own pointers,
 * whose lookups cost the sweep more than their transfer to the snapshot
 * child. Only a word inside one of the heap's spans can name a block. */
#include <stdint.h>
#include <string.h>

#include "memory.h"
#include "native.h"

#define REGION_SHIFT 20     /* the spans' 1 MiB regions, hashed: one probe a word */
#define MAX_REGIONS (1u << 16)

struct regions {
  uint64_t *keys; /* region + 1; 0: empty */
  uint64_t mask;
};

static uint64_t region_hash(uint64_t key) { return (key * UINT64_C(0x9E3779B97F4A7C15)) >> 40; }

static int region_add(struct regions *r, uint64_t region) {
  for (uint64_t i = region_hash(region + 1) & r->mask;; i = (i + 1) & r->mask) {
    if (r->keys[i] == region + 1) return 0;
    if (!r->keys[i]) {
      r->keys[i] = region + 1;
      return 1;
    }
  }
}

static int region_has(const struct regions *r, uint64_t region) {
  for (uint64_t i = region_hash(region + 1) & r->mask;; i = (i + 1) & r->mask) {
    if (r->keys[i] == region + 1) return 1;
    if (!r->keys[i]) return 0;
  }
}

/* Whether v lies in one of the n sorted, disjoint spans. */
static int in_spans(const uint64_t *spans, size_t n, uint64_t v) {
  size_t i = ur_range_after(spans, n, v);
  return i < n && spans[2 * i] <= v;
}

PyObject *ur_py_heap_words(PyObject *Py_UNUSED(self), PyObject *args) {
  Py_buffer words, sp;
  if (!PyArg_ParseTuple(args, "y*y*", &words, &sp)) return NULL;
  PyObject *result = NULL;
  const uint64_t *spans = sp.buf;
  size_t nspans = (size_t)sp.len / 16, nwords = (size_t)words.len / 8, count = 0;
  uint64_t *out = NULL;
  struct regions r = {0};
  /* Regions of every span, unless there are so many that a binary search
   * per word in range is the cheaper test. */
  uint64_t nregions = 0;
  for (size_t i = 0; i < nspans && nregions <= MAX_REGIONS; i++)
    if (spans[2 * i + 1] > spans[2 * i])
      nregions += ((spans[2 * i + 1] - 1) >> REGION_SHIFT) - (spans[2 * i] >> REGION_SHIFT) + 1;
  if (nregions && nregions <= MAX_REGIONS) {
    uint64_t size = 16;
    while (size < 2 * nregions) size <<= 1;
    r.keys = PyMem_Calloc(size, sizeof(*r.keys));
    if (!r.keys) goto nomem;
    r.mask = size - 1;
    for (size_t i = 0; i < nspans; i++)
      if (spans[2 * i + 1] > spans[2 * i])
        for (uint64_t g = spans[2 * i] >> REGION_SHIFT; g <= (spans[2 * i + 1] - 1) >> REGION_SHIFT;
             g++)
          region_add(&r, g);
  }
  out = PyMem_Malloc((nwords ? nwords : 1) * sizeof(*out));
  if (!out) goto nomem;
  if (nspans) {
    const uint64_t lo = spans[0], span = spans[2 * nspans - 1] - spans[0];
    const unsigned char *p = words.buf;
    for (size_t i = 0; i < nwords; i++) {
      uint64_t v;
      memcpy(&v, p + 8 * i, 8);
      if (v - lo >= span) continue;
      if (r.keys && !region_has(&r, v >> REGION_SHIFT)) continue;
      if (in_spans(spans, nspans, v)) out[count++] = v;
    }
  }
  result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(count * sizeof(*out)));
  goto done;
nomem:
  PyErr_NoMemory();
done:
  PyMem_Free(out);
  PyMem_Free(r.keys);
  PyBuffer_Release(&words);
  PyBuffer_Release(&sp);
  return result;
}
