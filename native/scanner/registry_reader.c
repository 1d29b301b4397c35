/*
 * Reads the shim's registry (abi.h) out of a stopped target or its frozen
 * snapshot child: its shards' tables and its size maps. Each shard's table
 * comes in large preads (the registry of a big process holds millions of
 * entries), each map in one; keys are unmangled here so that Python only ever
 * sees plain addresses.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "entry_order.h"
#include "memory.h"
#include "native.h"
#include "range_list.h"
#include "registry_walk.h"
#include "unreachable/abi.h"

#define MAX_SHARDS (1u << 16)
/* The shim makes 8192 (state.h's UR_MAX_THREADS): room to grow, and no
 * more, as the slots are read whole (64 bytes each) and each used one is a
 * Python object; a registry claiming more is forged. */
#define MAX_THREAD_SLOTS (1u << 16)
#define READ_BATCH (1u << 20) /* entries per pread: 16 MiB */
#define MAX_OPTIONS 4096

static const char bad_descriptor[] = "registry descriptor not found or incompatible (magic/version)";

/* A read refused as forged (entry_order.h: ur_registry_forged). */
#define RC_FORGED_TABLES (-1000 - UR_FORGED_TABLES)
#define RC_FORGED_MAPS (-1000 - UR_FORGED_MAPS)

/* A size-map list longer than the shim makes (UR_SIZE_MAP_MAX_REFS). */
#define RC_FORGED_MAP_LIST (-2000)

static int forged_rc(int forged) { return forged > 0 ? -1000 - forged : forged; }

/* The Python error for a failed read: rc is RC_FORGED_* or -ENOMEM. */
static void set_read_error(int rc) {
  if (rc == RC_FORGED_MAP_LIST)
    PyErr_Format(PyExc_ValueError,
                 "it is corrupt (its size maps' list claims more than the %llu maps the shim "
                 "makes): the process overwrote it, so nothing read from it can be trusted",
                 (unsigned long long)UR_SIZE_MAP_MAX_REFS);
  else if (rc == RC_FORGED_TABLES || rc == RC_FORGED_MAPS)
    PyErr_Format(PyExc_ValueError,
                 "it is corrupt (%s overlap, which the shim never makes): the process "
                 "overwrote it, so nothing read from it can be trusted",
                 rc == RC_FORGED_TABLES ? "its shards' tables" : "its size maps");
  else
    PyErr_NoMemory();
}

/* Reads and validates the descriptor; sets ValueError on failure. */
static int read_descriptor(struct ur_reader *r, uint64_t addr, struct ur_descriptor *d) {
  memset(d, 0, sizeof(*d));
  if (ur_reader_read(r, addr, d, sizeof(*d)) != sizeof(*d) || d->magic != UR_ABI_MAGIC ||
      d->version != UR_ABI_VERSION || d->size < sizeof(*d)) {
    PyErr_SetString(PyExc_ValueError, bad_descriptor);
    return -1;
  }
  return 0;
}

struct entries {
  uint64_t *pairs; /* begin, size */
  uint32_t *stack_ids;
  size_t n, cap;
};

/* The entry arrays can hold tens of millions of entries: huge pages (as the
 * walker's arrays) keep the kernel's page faulting off the profile. They
 * grow with mremap, which moves page tables, not bytes: a copy into new
 * arrays held both at once, and touched each byte again. */
static int entries_reserve(struct entries *e, size_t cap) {
  if (cap <= e->cap) return 0;
  if (cap > SIZE_MAX / (2 * sizeof(uint64_t))) return -ENOMEM;
  uint64_t *p = ur_big_realloc(e->pairs, cap * 2 * sizeof(*p));
  if (!p) return -ENOMEM;
  e->pairs = p;
  uint32_t *s = ur_big_realloc(e->stack_ids, cap * sizeof(*s));
  if (!s) return -ENOMEM;
  e->stack_ids = s;
  e->cap = cap;
  return 0;
}

/* The entries as two BigBuffers (allocs, stack_ids), trimmed to their
 * length: Python holds the arrays themselves, not copies. */
static int entries_to_python(struct entries *e, PyObject **pairs, PyObject **ids) {
  *pairs = *ids = NULL;
  size_t n = e->n;
  uint64_t *p = e->pairs ? ur_big_realloc(e->pairs, n * 2 * sizeof(uint64_t)) : NULL;
  if (p) e->pairs = p;
  uint32_t *s = e->stack_ids ? ur_big_realloc(e->stack_ids, n * sizeof(uint32_t)) : NULL;
  if (s) e->stack_ids = s;
  *pairs = ur_big_buffer(e->pairs, n * 2 * sizeof(uint64_t));
  e->pairs = NULL;
  *ids = ur_big_buffer(e->stack_ids, n * sizeof(uint32_t));
  e->stack_ids = NULL;
  if (*pairs && *ids) return 0;
  Py_CLEAR(*pairs);
  Py_CLEAR(*ids);
  return -1;
}

/* A shim that keeps the shards' lock words apart (descriptor.shard_locks):
 * into each shard's lock field, as an older one has them. */
static void read_shard_locks(struct ur_reader *r, const struct ur_descriptor *d,
                             struct ur_shard *shards, uint32_t nshards) {
  if (!d->shard_locks || !nshards) return;
  uint32_t *locks = calloc(nshards, sizeof *locks);
  if (!locks) return; /* diagnostics only */
  ur_reader_read_anon(r, d->shard_locks, locks, nshards * sizeof *locks);
  for (uint32_t i = 0; i < nshards; i++) shards[i].lock = locks[i];
  free(locks);
}

/* The present runs of each shard's table (ur_reader_present), entry
 * aligned; runs[s] NULL for a shard without a table. How many entries they
 * hold in all, or -ENOMEM. A table may claim 2^32 entries (64 GiB) of
 * memory never touched, or its process swap out: only what it has is
 * read, so a forged capacity costs a walk of page tables, not a pass over
 * 64 GiB of zeros. */
static int64_t present_runs(struct ur_reader *r, const struct ur_shard *shards, uint32_t nshards,
                            uint64_t **runs, size_t *nruns) {
  int64_t entries = 0;
  for (uint32_t s = 0; s < nshards; s++) {
    uint64_t cap, table;
    if (!ur_registry_table(&shards[s], &table, &cap)) continue;
    uint64_t len = cap * sizeof(struct ur_entry);
    if (ur_reader_present(r, table, len, &runs[s], &nruns[s]) < 0) return -ENOMEM;
    for (size_t k = 0; k < nruns[s]; k++) {
      uint64_t *b = &runs[s][2 * k], *e = &runs[s][2 * k + 1];
      *b = table + (*b - table) / sizeof(struct ur_entry) * sizeof(struct ur_entry);
      uint64_t up = (*e - table + sizeof(struct ur_entry) - 1) / sizeof(struct ur_entry);
      *e = table + (up < cap ? up : cap) * sizeof(struct ur_entry);
      entries += (int64_t)((*e - *b) / sizeof(struct ur_entry));
    }
  }
  return entries;
}

/* The shards' counts, each no more than the entries its table's present
 * runs hold: the count is the target's word, and a forged one (2^32 a
 * shard, 2^48 in all) must not size the arrays or make the scanner's
 * memory estimate before the tables are read. */
static uint64_t present_expected(const struct ur_shard *shards, uint32_t nshards,
                                 uint64_t *const *runs, const size_t *nruns) {
  uint64_t total = 0;
  for (uint32_t s = 0; s < nshards; s++) {
    uint64_t present = 0;
    for (size_t k = 0; k < nruns[s]; k++)
      present += (runs[s][2 * k + 1] - runs[s][2 * k]) / sizeof(struct ur_entry);
    total += shards[s].count < present ? shards[s].count : present;
  }
  return total;
}

/* The live entries of [b, e) of a table, in reads of READ_BATCH entries. */
static int read_run(struct ur_reader *r, uint64_t b, uint64_t e, struct ur_entry *buf,
                    struct entries *out) {
  for (uint64_t pos = b; pos < e;) {
    uint64_t left = (e - pos) / sizeof(*buf);
    size_t cnt = (size_t)(left < READ_BATCH ? left : READ_BATCH);
    /* Unreadable pages read as zero = empty keys. */
    ur_reader_read_anon(r, pos, buf, cnt * sizeof(*buf));
    if (out->n + cnt > out->cap && entries_reserve(out, 2 * (out->n + cnt)) < 0) return -ENOMEM;
    out->n += ur_registry_collect(buf, cnt, out->pairs + 2 * out->n, out->stack_ids + out->n);
    pos += cnt * sizeof(*buf);
  }
  return 0;
}

/* The shards' tables: refused if forged, else their present runs
 * (present_runs; free_runs after) and *expected, the live entries they may
 * hold (present_expected). */
static int table_runs(struct ur_reader *r, const struct ur_shard *shards, uint32_t nshards,
                      uint64_t ***runs, size_t **nruns, uint64_t *expected) {
  int forged = forged_rc(ur_registry_forged(shards, nshards, NULL, 0));
  if (forged) return forged;
  *runs = calloc(nshards ? nshards : 1, sizeof(**runs));
  *nruns = calloc(nshards ? nshards : 1, sizeof(**nruns));
  int64_t present = *runs && *nruns ? present_runs(r, shards, nshards, *runs, *nruns) : -ENOMEM;
  if (present < 0) return (int)present;
  *expected = present_expected(shards, nshards, *runs, *nruns);
  return 0;
}

static void free_runs(uint64_t **runs, size_t *nruns, uint32_t nshards) {
  for (uint32_t s = 0; runs && s < nshards; s++) free(runs[s]);
  free(runs);
  free(nruns);
}

/* The live entries the shards' tables may hold, for the memory estimate
 * made before they are read (read_registry without entries), or RC_FORGED_*
 * or -ENOMEM. */
static int64_t tables_expected(struct ur_reader *r, const struct ur_shard *shards,
                               uint32_t nshards) {
  uint64_t **runs = NULL, expected = 0;
  size_t *nruns = NULL;
  int rc = table_runs(r, shards, nshards, &runs, &nruns, &expected);
  free_runs(runs, nruns, nshards);
  return rc < 0 ? rc : (int64_t)expected;
}

/* The shards' entries, appended to e; *read: the bytes of tables read;
 * *expected: what tables_expected says of them. */
static int read_tables(struct ur_reader *r, const struct ur_shard *shards, uint32_t nshards,
                       struct entries *e, uint64_t *read, uint64_t *expected) {
  uint64_t **runs = NULL;
  size_t *nruns = NULL;
  struct ur_entry *buf = malloc(READ_BATCH * sizeof(*buf));
  int rc = buf ? table_runs(r, shards, nshards, &runs, &nruns, expected) : -ENOMEM;
  /* Size the arrays once from the shards' counts (no more than the entries
   * present): growing them by doubling touches (and has the kernel zero)
   * several times the final memory. */
  size_t want = e->n + (size_t)*expected + (size_t)(*expected / 64) + 16;
  if (rc == 0 && entries_reserve(e, want) < 0) rc = -ENOMEM;
  for (uint32_t s = 0; rc == 0 && s < nshards; s++)
    for (size_t k = 0; rc == 0 && k < nruns[s]; k++) {
      rc = read_run(r, runs[s][2 * k], runs[s][2 * k + 1], buf, e);
      *read += runs[s][2 * k + 1] - runs[s][2 * k];
    }
  free_runs(runs, nruns, nshards);
  free(buf);
  return rc;
}

/* How many refs the size maps' list holds (0: none yet), or
 * RC_FORGED_MAP_LIST: the shim makes its list once, of UR_SIZE_MAP_MAX_REFS,
 * so a longer one (up to 2^64 refs to allocate for) was forged. */
static int64_t refs_count(const struct ur_size_maps *h) {
  if (!h->refs || !h->count) return 0;
  if (h->count > h->capacity || h->capacity > UR_SIZE_MAP_MAX_REFS) return RC_FORGED_MAP_LIST;
  return (int64_t)h->count;
}

/* The level-0 pages of the map at addr a copy holds (bit i: page i). */
static uint32_t held_l0_pages(struct ur_pread_mem *copy, uint64_t addr) {
  uint32_t held = 0;
  for (uint32_t i = 0; i < UR_SIZE_MAP_L0_PAGES; i++)
    if (ur_mem_holds_page(copy, addr + (uint64_t)i * UR_PAGE_SIZE)) held |= UINT32_C(1) << i;
  return held;
}

/* The bytes of the map at addr, and in *l0_pages the pages of its level 0
 * they hold (bit i: page i; the others read as zero, and the walk passes
 * over them). A copy's map held whole in one chunk is read in place; of one
 * it holds in part (the concurrent mark's second registry copy holds the
 * pages of its candidates' entries), only the pages it holds are read into
 * buf, with the levels above; anything else, and any map asked with
 * l0_pages NULL (a count, which reads every page), is read into buf whole. */
static const void *map_bytes(struct ur_reader *r, uint64_t addr, uint8_t *buf, uint32_t *l0_pages) {
  if (r->copy && !(addr & (UR_PAGE_SIZE - 1))) {
    const uint8_t *in_place = ur_mem_held_bytes(r->copy, addr, UR_SIZE_MAP_BYTES);
    if (in_place) return in_place;
    uint32_t held = l0_pages ? held_l0_pages(r->copy, addr) : UR_SIZE_MAP_L0_ALL;
    if (held != UR_SIZE_MAP_L0_ALL) {
      for (uint32_t i = 0; i < UR_SIZE_MAP_L0_PAGES; i++)
        if (held & (UINT32_C(1) << i))
          ur_reader_read(r, addr + (uint64_t)i * UR_PAGE_SIZE, buf + i * UR_PAGE_SIZE,
                         UR_PAGE_SIZE);
      ur_reader_read(r, addr + UR_SIZE_MAP_L1_OFFSET, buf + UR_SIZE_MAP_L1_OFFSET,
                     UR_SIZE_MAP_BYTES - UR_SIZE_MAP_L1_OFFSET);
      *l0_pages = held;
      return buf;
    }
  }
  ur_reader_read_anon(r, addr, buf, UR_SIZE_MAP_BYTES);
  return buf;
}

/* The size maps' entries (abi.h v5): appended to e, or with e NULL only
 * counted. Returns the live entries seen, RC_FORGED_* or -ENOMEM. */
static int64_t read_maps(struct ur_reader *r, uint64_t header_addr, struct entries *e) {
  struct ur_size_maps h = {0};
  if (!header_addr) return 0;
  ur_reader_read_anon(r, header_addr, &h, sizeof(h));
  int64_t listed = refs_count(&h);
  if (listed <= 0) return listed;
  uint64_t nrefs = (uint64_t)listed;
  struct ur_size_map_ref *refs = malloc(nrefs * sizeof(*refs));
  uint64_t *map = malloc(UR_SIZE_MAP_BYTES); /* words: read a word at a time */
  uint32_t *order = NULL;
  int64_t total = -ENOMEM;
  if (!refs || !map) goto out;
  ur_reader_read_anon(r, h.refs, refs, nrefs * sizeof(*refs));
  if ((total = forged_rc(ur_registry_forged(NULL, 0, refs, nrefs))) != 0) goto out;
  total = -ENOMEM;
  /* By base: the entries then come in address order (entry_order.h). */
  if (ur_size_map_order(refs, nrefs, &order)) goto out;
  total = 0;
  for (uint64_t k = 0; k < nrefs; k++) {
    const struct ur_size_map_ref *ref = &refs[order[k]];
    if (!ref->map) continue;
    /* Unreadable pages read as zero: no entries. */
    uint32_t l0_pages = UR_SIZE_MAP_L0_ALL;
    const void *bytes = map_bytes(r, ref->map, (uint8_t *)map, e ? &l0_pages : NULL);
    if (!e) {
      total += (int64_t)ur_size_map_live(bytes);
      continue;
    }
    /* Room for a whole map (only what is written is backed): the walk
     * counts its entries, with no pass over the map to count them first. */
    if (e->n + UR_SIZE_MAP_MAX_LIVE > e->cap &&
        entries_reserve(e, 2 * (e->n + UR_SIZE_MAP_MAX_LIVE)) < 0) {
      total = -ENOMEM;
      break;
    }
    /* A map's entries have no stack id, and the id array is fresh zeroed
     * memory (mapped, never written: the maps are read before the shards):
     * not written, its pages are never touched (4 bytes per allocation the
     * kernel would zero, and the scanner hold). */
    size_t live = ur_size_map_collect_held(bytes, ref->base, e->pairs + 2 * e->n, NULL, l0_pages);
    e->n += live;
    total += (int64_t)live;
  }
out:
  ur_big_free(order);
  free(refs);
  free(map);
  return total;
}

/* Order the entries by address (roots, folding and reports want it; in C,
 * as Python would take seconds for 10M), dropping later duplicates of an
 * address. Entries before from_shards are the maps', read in address
 * order, so only the shards' are sorted, and merged in from the back
 * (entry_order.h): the maps' entries below the lowest of them, and their
 * untouched ids, stay where they are. */
static int sort_by_address(struct entries *e, size_t from_shards) {
  int rc = ur_entries_order_maps_first(e->pairs, e->stack_ids, e->n, from_shards);
  if (rc) return rc;
  size_t k = 0;
  for (size_t i = 0; i < e->n; i++) {
    if (k > 0 && e->pairs[2 * (k - 1)] == e->pairs[2 * i]) continue; /* stable: the first stays */
    if (k != i) { /* only past a duplicate: the ids' untouched pages stay so */
      e->pairs[2 * k] = e->pairs[2 * i];
      e->pairs[2 * k + 1] = e->pairs[2 * i + 1];
      e->stack_ids[k] = e->stack_ids[i];
    }
    k++;
  }
  e->n = k;
  return 0;
}

static uint64_t unmangle_opt(uint64_t v) { return v ? (uint64_t)UR_UNMANGLE(v) : 0; }

static int set_item(PyObject *dict, const char *key, PyObject *value) {
  int rc = value ? PyDict_SetItemString(dict, key, value) : -1;
  Py_XDECREF(value);
  return rc;
}

/* The shim's pieces of memory (abi v4; none read: the first alone), why it
 * is disabled, and how many blocks it could not register. */
static int add_regions(PyObject *result, const struct ur_descriptor *d,
                       const struct ur_region_span *spans, uint32_t nspans) {
  PyObject *list = PyList_New(0);
  if (!list) return -1;
  if (!nspans && d->region_end > d->region_begin) {
    PyObject *item = Py_BuildValue("(KK)", (unsigned long long)d->region_begin,
                                   (unsigned long long)d->region_end);
    if (!item || PyList_Append(list, item) < 0) {
      Py_XDECREF(item);
      goto fail;
    }
    Py_DECREF(item);
  }
  for (uint32_t i = 0; i < nspans; i++) {
    if (spans[i].end <= spans[i].begin) continue;
    PyObject *item = Py_BuildValue("(KK)", (unsigned long long)spans[i].begin,
                                   (unsigned long long)spans[i].end);
    if (!item || PyList_Append(list, item) < 0) {
      Py_XDECREF(item);
      goto fail;
    }
    Py_DECREF(item);
  }
  if (set_item(result, "regions", list) < 0) return -1;
  if (set_item(result, "disabled", PyLong_FromUnsignedLong(d->disabled)) < 0 ||
      set_item(result, "disabled_errno", PyLong_FromLong(d->disabled_errno)) < 0 ||
      set_item(result, "unregistered", PyLong_FromUnsignedLongLong(d->unregistered)) < 0 ||
      set_item(result, "helper_frames", PyLong_FromUnsignedLongLong(d->helper_frames)) < 0)
    return -1;
  return 0;
fail:
  Py_DECREF(list);
  return -1;
}

PyObject *ur_py_read_registry(PyObject *Py_UNUSED(self), PyObject *args) {
  PyObject *source;
  int with_entries = 1, count_maps = 1;
  unsigned long long addr;
  if (!PyArg_ParseTuple(args, "OK|pp", &source, &addr, &with_entries, &count_maps)) return NULL;
  struct ur_reader rd;
  if (ur_reader_open(source, &rd) < 0) return NULL;
  struct ur_descriptor d;
  struct entries e = {0};
  struct ur_shard *shards = NULL;
  struct ur_thread_slot *slots = NULL;
  PyObject *result = NULL, *threads = NULL, *locked = NULL, *allocs = NULL, *ids = NULL;
  struct ur_region_span *spans = NULL;
  uint32_t nspans = 0;
  if (read_descriptor(&rd, addr, &d) < 0) goto out;

  if (d.num_shards > MAX_SHARDS || d.max_threads > MAX_THREAD_SLOTS) {
    PyErr_Format(PyExc_ValueError,
                 "it is corrupt (%u shards, %u thread slots: more than the shim makes): the "
                 "process overwrote it, so nothing read from it can be trusted",
                 d.num_shards, d.max_threads);
    goto out;
  }
  uint32_t nshards = d.num_shards, nslots = d.max_threads;
  shards = calloc(nshards ? nshards : 1, sizeof(*shards));
  slots = calloc(nslots ? nslots : 1, sizeof(*slots));
  if (!shards || !slots) {
    PyErr_NoMemory();
    goto out;
  }
  int rc = 0;
  char options[MAX_OPTIONS + 1] = "";
  struct ur_stack_table st = {0};
  uint64_t expected = 0, tables_read = 0;
  Py_BEGIN_ALLOW_THREADS
  if (d.shards) ur_reader_read_anon(&rd, d.shards, shards, nshards * sizeof(*shards));
  read_shard_locks(&rd, &d, shards, nshards);
  if (d.threads) ur_reader_read_anon(&rd, d.threads, slots, nslots * sizeof(*slots));
  if (d.options) {
    ur_reader_read(&rd, d.options, options, MAX_OPTIONS);
    options[MAX_OPTIONS] = 0;
  }
  if (d.stacks) ur_reader_read(&rd, d.stacks, &st, sizeof(st));
  /* Without entries (the snapshot child sweeps itself): threads, shards,
   * options and, unless count_maps is false, `expected`: the maps' count (a
   * read of every map: an eighth of the heap's span) and the tables' as
   * their present pages bound it. */
  if (with_entries || count_maps) {
    int64_t in_maps = read_maps(&rd, d.size_maps, with_entries ? &e : NULL);
    if (in_maps < 0) rc = (int)in_maps;
    else expected += (uint64_t)in_maps;
  }
  /* The shards' entries after the maps': few without backtraces, and
   * merged in from the back (sort_by_address). */
  size_t from_shards = e.n;
  uint64_t in_tables = 0;
  if (rc == 0 && with_entries) rc = read_tables(&rd, shards, nshards, &e, &tables_read, &in_tables);
  if (rc == 0 && with_entries) rc = sort_by_address(&e, from_shards);
  if (rc == 0 && !with_entries && count_maps) {
    int64_t counted = tables_expected(&rd, shards, nshards);
    if (counted < 0) rc = (int)counted;
    else in_tables = (uint64_t)counted;
  }
  expected += in_tables;
  nspans = d.regions && d.num_regions <= UR_MAX_REGIONS ? (uint32_t)d.num_regions : 0;
  if (nspans && (spans = malloc(nspans * sizeof(*spans))) != NULL)
    ur_reader_read_anon(&rd, d.regions, spans, nspans * sizeof(*spans));
  else if (nspans)
    rc = -ENOMEM;
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    set_read_error(rc);
    goto out;
  }

  threads = PyList_New(0);
  locked = PyList_New(0);
  if (!threads || !locked) goto out;
  for (uint32_t i = 0; i < nslots; i++) {
    const struct ur_thread_slot *t = &slots[i];
    if (t->state == UR_THREAD_FREE) continue;
    PyObject *item = Py_BuildValue("(IIIKKKKKK)", t->tid, t->state, t->op,
                                   (unsigned long long)unmangle_opt(t->in_ptr),
                                   (unsigned long long)t->in_size,
                                   (unsigned long long)unmangle_opt(t->out_ptr),
                                   (unsigned long long)t->out_size,
                                   (unsigned long long)t->stack_lo,
                                   (unsigned long long)t->stack_hi);
    if (!item || PyList_Append(threads, item) < 0) {
      Py_XDECREF(item);
      goto out;
    }
    Py_DECREF(item);
  }
  for (uint32_t i = 0; i < nshards; i++) {
    if (!shards[i].lock) continue;
    PyObject *item = Py_BuildValue("(II)", i, shards[i].lock & 0x7fffffffu); /* its holder */
    if (!item || PyList_Append(locked, item) < 0) {
      Py_XDECREF(item);
      goto out;
    }
    Py_DECREF(item);
  }
  if (entries_to_python(&e, &allocs, &ids) < 0) goto out;
  result = Py_BuildValue(
      "{s:O,s:O,s:O,s:O,s:I,s:I,s:K,s:K,s:K,s:s,s:I,s:I,s:K}", "allocs", allocs,
      "stack_ids", ids, "threads", threads, "locked_shards", locked,
      "enabled", d.enabled, "helper_tid", d.helper_tid, "helper_cmd",
      (unsigned long long)d.helper_cmd, "region_begin", (unsigned long long)d.region_begin,
      "region_end", (unsigned long long)d.region_end, "options", options, "max_frames",
      st.max_frames, "stack_count", st.count, "expected", (unsigned long long)expected);
  /* options is arbitrary bytes from the target: fall back to a lossy decode. */
  if (!result && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
    PyErr_Clear();
    PyObject *opt = PyUnicode_DecodeUTF8(options, (Py_ssize_t)strlen(options), "replace");
    if (opt) {
      result = Py_BuildValue(
          "{s:O,s:O,s:O,s:O,s:I,s:I,s:K,s:K,s:K,s:N,s:I,s:I,s:K}", "allocs", allocs,
          "stack_ids", ids, "threads", threads,
          "locked_shards", locked, "enabled", d.enabled, "helper_tid", d.helper_tid,
          "helper_cmd", (unsigned long long)d.helper_cmd, "region_begin",
          (unsigned long long)d.region_begin, "region_end", (unsigned long long)d.region_end,
          "options", opt, "max_frames", st.max_frames, "stack_count", st.count, "expected",
          (unsigned long long)expected);
    }
  }
  if (result && add_regions(result, &d, spans, nspans) < 0) Py_CLEAR(result);
  /* The shards' table bytes read: what is present, not what they claim. */
  if (result && set_item(result, "tables_read", PyLong_FromUnsignedLongLong(tables_read)) < 0)
    Py_CLEAR(result);
  /* Allocations the shim kept no stack for: its table full, or not grown. */
  if (result && set_item(result, "stacks_dropped", PyLong_FromUnsignedLong(st.overflowed)) < 0)
    Py_CLEAR(result);
out:
  free(spans);
  Py_XDECREF(threads);
  Py_XDECREF(locked);
  Py_XDECREF(allocs);
  Py_XDECREF(ids);
  ur_big_free(e.pairs);
  ur_big_free(e.stack_ids);
  free(shards);
  free(slots);
  ur_reader_close(&rd);
  return result;
}

#define MAX_WHOLE_FRAMES (UINT64_C(64) << 20)

/* The stack table's segments (abi.h): the addresses of each one's frames
 * and counts, 0 for one not made (or not readable). */
struct stack_segments {
  uint64_t frames[UR_STACK_SEGMENTS], counts[UR_STACK_SEGMENTS];
};

/* The address of id's frames in the target. */
static uint64_t frames_addr(const struct stack_segments *s, uint32_t id, uint32_t maxf) {
  uint32_t k = ur_stack_segment(id);
  return s->frames[k] + (uint64_t)(id - ur_stack_segment_base(k)) * maxf * sizeof(uint64_t);
}

/* counts[id] for ids [0, count), and (frames not NULL) their frames at
 * frames[id * maxf], segment by segment. */
static void read_segments(struct ur_reader *rd, const struct stack_segments *s, uint32_t count,
                          uint32_t maxf, uint16_t *counts, uint64_t *frames) {
  for (uint32_t k = 0; k < UR_STACK_SEGMENTS; k++) {
    uint32_t base = ur_stack_segment_base(k);
    if (base >= count) break;
    uint32_t n = count - base < ur_stack_segment_ids(k) ? count - base : ur_stack_segment_ids(k);
    if (s->counts[k]) ur_reader_read(rd, s->counts[k], counts + base, n * sizeof(*counts));
    if (frames && s->frames[k])
      ur_reader_read_anon(rd, s->frames[k], frames + (size_t)base * maxf,
                          (size_t)n * maxf * sizeof(*frames));
  }
}

PyObject *ur_py_read_stacks(PyObject *Py_UNUSED(self), PyObject *args) {
  PyObject *source;
  unsigned long long addr;
  Py_buffer ids;
  if (!PyArg_ParseTuple(args, "OKy*", &source, &addr, &ids)) return NULL;
  PyObject *result = NULL;
  uint16_t *counts = NULL;
  uint64_t *frames = NULL, *one = NULL;
  struct ur_reader rd = {-1, NULL, -1, 0, NULL, 0};
  if (ids.len % 4) {
    PyErr_SetString(PyExc_ValueError, "ids must be packed u32 (length a multiple of 4)");
    goto out;
  }
  if (ur_reader_open(source, &rd) < 0) goto out;
  struct ur_descriptor d;
  if (read_descriptor(&rd, addr, &d) < 0) goto out;
  struct ur_stack_table st = {0};
  if (d.stacks) ur_reader_read(&rd, d.stacks, &st, sizeof(st));
  uint32_t count = st.count < st.capacity ? st.count : st.capacity;
  uint32_t maxf = st.max_frames;
  if (!st.frames || !st.frame_counts || maxf == 0 || maxf > 4096) count = 0;
  /* The table's count is the target's word: up to 2^32 stacks (8 GiB of
   * counts, and as much of the scanner's memory read from a mapping that
   * costs the target nothing). Only the ids asked for are read. */
  uint32_t top = 0;
  for (size_t i = 0; i < (size_t)ids.len / 4; i++) {
    uint32_t id;
    memcpy(&id, (const char *)ids.buf + 4 * i, 4);
    if (id > top) top = id;
  }
  if (count > top) count = top + 1;
  counts = calloc(count ? count : 1, sizeof(*counts));
  one = calloc(maxf ? maxf : 1, sizeof(*one));
  if (!counts || !one) {
    PyErr_NoMemory();
    goto out;
  }
  uint64_t whole = (uint64_t)count * maxf * sizeof(uint64_t);
  struct stack_segments segs = {{0}, {0}};
  Py_BEGIN_ALLOW_THREADS
  if (count) {
    ur_reader_read(&rd, st.frames, segs.frames, sizeof(segs.frames));
    ur_reader_read(&rd, st.frame_counts, segs.counts, sizeof(segs.counts));
    /* One read a segment for the frames when they are of sane size, else per id. */
    if (whole <= MAX_WHOLE_FRAMES) frames = calloc(1, whole);
    read_segments(&rd, &segs, count, maxf, counts, frames);
  }
  Py_END_ALLOW_THREADS
  if (!(result = PyDict_New())) goto out;
  size_t nids = (size_t)ids.len / 4;
  for (size_t i = 0; i < nids; i++) {
    uint32_t id;
    memcpy(&id, (const char *)ids.buf + 4 * i, 4);
    PyObject *key = PyLong_FromUnsignedLong(id);
    if (!key) goto fail;
    int has = PyDict_Contains(result, key);
    if (has) {
      Py_DECREF(key);
      if (has < 0) goto fail;
      continue;
    }
    size_t nf = 0;
    const uint64_t *pcs = NULL;
    if (id > 0 && id < count) {
      nf = counts[id] < maxf ? counts[id] : maxf;
      if (frames) {
        pcs = frames + (size_t)id * maxf;
      } else {
        ur_reader_read(&rd, frames_addr(&segs, id, maxf), one, nf * 8);
        pcs = one;
      }
    }
    PyObject *tup = PyTuple_New((Py_ssize_t)nf);
    if (!tup) {
      Py_DECREF(key);
      goto fail;
    }
    for (size_t f = 0; f < nf; f++) {
      PyObject *pc = PyLong_FromUnsignedLongLong(pcs[f]);
      if (!pc) {
        Py_DECREF(tup);
        Py_DECREF(key);
        goto fail;
      }
      PyTuple_SET_ITEM(tup, (Py_ssize_t)f, pc);
    }
    int r = PyDict_SetItem(result, key, tup);
    Py_DECREF(key);
    Py_DECREF(tup);
    if (r < 0) goto fail;
  }
  goto out;
fail:
  Py_CLEAR(result);
out:
  free(counts);
  free(frames);
  free(one);
  ur_reader_close(&rd);
  PyBuffer_Release(&ids);
  return result;
}

/* A level of a map: the largest block it holds, its granule, where its
 * entries start and their width (abi.h). */
static const struct {
  uint64_t reach, offset;
  unsigned shift, width;
} levels[3] = {
    {UR_SIZE_MAP_L0_MAX_SIZE, 0, UR_SIZE_MAP_L0_SHIFT, 1},
    {UR_SIZE_MAP_L1_MAX_SIZE, UR_SIZE_MAP_L1_OFFSET, UR_SIZE_MAP_L1_SHIFT, 2},
    {UR_SIZE_MAP_MAX_SIZE, UR_SIZE_MAP_L2_OFFSET, UR_SIZE_MAP_L2_SHIFT, 4},
};

/* The address of the entry of level l for the granule of offset at. */
static uint64_t entry_at(uint64_t map_addr, int l, uint64_t at) {
  return map_addr + levels[l].offset + levels[l].width * (at >> levels[l].shift);
}

/* The page of a block's entry in the map at map_addr: its level follows
 * from its size alone (abi.h). */
static uint64_t entry_page(uint64_t map_addr, uint64_t base, uint64_t begin, uint64_t size) {
  int l = size <= levels[0].reach ? 0 : size <= levels[1].reach ? 1 : 2;
  return entry_at(map_addr, l, begin - base) & ~(uint64_t)4095;
}

/* size_map_pages(memory, descriptor_addr, blocks) -> (bodies, pages): the
 * whole pages of every size map (packed u64 pairs), and the pages that hold
 * the map entries of the given (begin, size) pairs. A registry copy made of
 * everything but the bodies, and those pages, decodes every one of those
 * blocks as a whole copy would (maps are never moved or freed). */
_Static_assert(offsetof(struct ur_size_map_ref, base) == 0, "refs sort by their first word");

/* The size maps' refs (sorted by base) of the registry at addr: 0, or -1
 * with a Python error set. */
static int load_refs(struct ur_reader *rd, unsigned long long addr, struct ur_size_map_ref **refs,
                     uint64_t *nrefs) {
  struct ur_descriptor d;
  *refs = NULL;
  *nrefs = 0;
  if (read_descriptor(rd, addr, &d) < 0) return -1;
  struct ur_size_maps h = {0};
  if (d.size_maps) ur_reader_read_anon(rd, d.size_maps, &h, sizeof(h));
  int64_t listed = refs_count(&h);
  if (listed < 0) {
    set_read_error((int)listed);
    return -1;
  }
  if (!listed) return 0;
  if (!(*refs = malloc((size_t)listed * sizeof(**refs)))) {
    PyErr_NoMemory();
    return -1;
  }
  *nrefs = (uint64_t)listed;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  ur_reader_read_anon(rd, h.refs, *refs, *nrefs * sizeof(**refs));
  rc = forged_rc(ur_registry_forged(NULL, 0, *refs, *nrefs));
  qsort(*refs, *nrefs, sizeof(**refs), ur_by_first_u64);
  Py_END_ALLOW_THREADS
  if (rc) {
    set_read_error(rc);
    free(*refs);
    *refs = NULL;
    *nrefs = 0;
    return -1;
  }
  return 0;
}

static const struct ur_size_map_ref *ref_at(const struct ur_size_map_ref *refs, uint64_t nrefs,
                                            uint64_t base) {
  size_t lo = 0, hi = (size_t)nrefs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (refs[mid].base < base)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < nrefs && refs[lo].base == base && refs[lo].map ? &refs[lo] : NULL;
}

PyObject *ur_py_size_map_pages(PyObject *Py_UNUSED(self), PyObject *args) {
  PyObject *source;
  unsigned long long addr;
  Py_buffer blocks;
  if (!PyArg_ParseTuple(args, "OKy*", &source, &addr, &blocks)) return NULL;
  struct ur_reader rd;
  if (ur_reader_open(source, &rd) < 0) {
    PyBuffer_Release(&blocks);
    return NULL;
  }
  PyObject *result = NULL;
  struct ur_size_map_ref *refs = NULL;
  uint64_t *bodies = NULL, *pages = NULL;
  size_t nb = 0, cb = 0, np = 0, cp = 0;
  int rc = 0;
  uint64_t nrefs = 0;
  if (load_refs(&rd, addr, &refs, &nrefs) < 0) goto out;
  const uint64_t *b = blocks.buf;
  size_t n = (size_t)blocks.len / 16;
  Py_BEGIN_ALLOW_THREADS
  for (uint64_t k = 0; rc == 0 && k < nrefs; k++) {
    if (!refs[k].map) continue;
    uint64_t lo = (refs[k].map + 4095) & ~(uint64_t)4095;
    uint64_t hi = (refs[k].map + UR_SIZE_MAP_BYTES) & ~(uint64_t)4095;
    if (lo < hi) rc = ur_ranges_append(&bodies, &nb, &cb, lo, hi);
  }
  for (size_t i = 0; rc == 0 && i < n; i++) {
    uint64_t begin = b[2 * i], size = b[2 * i + 1];
    uint64_t base = begin & ~((UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT) - 1);
    if (size > UR_SIZE_MAP_MAX_SIZE) continue; /* never in a map */
    const struct ur_size_map_ref *ref = ref_at(refs, nrefs, base);
    if (!ref) continue;
    uint64_t page = entry_page(ref->map, base, begin, size);
    if (!np || pages[2 * np - 2] != page)
      rc = ur_ranges_append(&pages, &np, &cp, page, page + 4096);
  }
  Py_END_ALLOW_THREADS
  if (rc) {
    PyErr_NoMemory();
    goto out;
  }
  result = Py_BuildValue("(y#y#)", bodies ? (const char *)bodies : "", (Py_ssize_t)(nb * 16),
                         pages ? (const char *)pages : "", (Py_ssize_t)(np * 16));
out:
  free(refs);
  free(bodies);
  free(pages);
  ur_reader_close(&rd);
  PyBuffer_Release(&blocks);
  return result;
}

/* The pages of the entries of every block a map could have over [lo, hi):
 * at each level, the entries of the granules a block that reaches lo may
 * begin in, up to hi. */
static int around(const struct ur_size_map_ref *refs, uint64_t nrefs, uint64_t lo, uint64_t hi,
                  uint64_t **out, size_t *n, size_t *cap) {
  const uint64_t span = UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT;
  for (int l = 0; l < 3; l++) {
    uint64_t from = lo > levels[l].reach ? lo - levels[l].reach : 0;
    for (uint64_t base = from & ~(span - 1); base < hi; base += span) {
      const struct ur_size_map_ref *ref = ref_at(refs, nrefs, base);
      if (!ref) continue;
      uint64_t a = from > base ? from - base : 0, b = hi - base < span ? hi - base : span;
      uint64_t first = entry_at(ref->map, l, a), last = entry_at(ref->map, l, b - 1);
      int rc = ur_ranges_append(out, n, cap, first & ~(uint64_t)4095,
                            (last + levels[l].width + 4095) & ~(uint64_t)4095);
      if (rc) return rc;
    }
  }
  return 0;
}

/* size_map_pages_around(memory, descriptor_addr, ranges) -> pages: the pages
 * (packed u64 pairs, sorted, merged) of the size-map entries of every block
 * that could hold an address of the (begin, end) ranges. A copy of the
 * registry that holds them knows every block over those addresses. */
PyObject *ur_py_size_map_pages_around(PyObject *Py_UNUSED(self), PyObject *args) {
  PyObject *source;
  unsigned long long addr;
  Py_buffer ranges;
  if (!PyArg_ParseTuple(args, "OKy*", &source, &addr, &ranges)) return NULL;
  struct ur_reader rd;
  if (ur_reader_open(source, &rd) < 0) {
    PyBuffer_Release(&ranges);
    return NULL;
  }
  PyObject *result = NULL;
  struct ur_size_map_ref *refs = NULL;
  uint64_t *pages = NULL, nrefs = 0;
  size_t np = 0, cp = 0, merged = 0;
  int rc = 0;
  if (load_refs(&rd, addr, &refs, &nrefs) < 0) goto out;
  const uint64_t *r = ranges.buf;
  size_t n = (size_t)ranges.len / 16;
  Py_BEGIN_ALLOW_THREADS
  for (size_t i = 0; rc == 0 && i < n; i++)
    if (r[2 * i + 1] > r[2 * i]) rc = around(refs, nrefs, r[2 * i], r[2 * i + 1], &pages, &np, &cp);
  if (rc == 0 && np) {
    qsort(pages, np, 2 * sizeof(uint64_t), ur_by_first_u64);
    for (size_t i = 1; i < np; i++) {
      if (pages[2 * i] <= pages[2 * merged + 1]) {
        if (pages[2 * i + 1] > pages[2 * merged + 1]) pages[2 * merged + 1] = pages[2 * i + 1];
      } else {
        merged++;
        pages[2 * merged] = pages[2 * i];
        pages[2 * merged + 1] = pages[2 * i + 1];
      }
    }
    merged++;
  }
  Py_END_ALLOW_THREADS
  if (rc) {
    PyErr_NoMemory();
    goto out;
  }
  result = PyBytes_FromStringAndSize(pages ? (const char *)pages : "", (Py_ssize_t)(merged * 16));
out:
  free(refs);
  free(pages);
  ur_reader_close(&rd);
  PyBuffer_Release(&ranges);
  return result;
}
