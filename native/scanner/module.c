/* unreachable._native: method table and type registration only. */
#include "native.h"

static PyMethodDef methods[] = {
    {"read_registry", ur_py_read_registry, METH_VARARGS,
     "read_registry(memory, descriptor_addr, entries=True) -> dict\n\n"
     "Read the shim's allocation registry (abi.h) out of memory (a pid or a MemoryCopy); "
     "without entries, only threads, shards and options (allocs and stack_ids empty); "
     "expected: the live allocations the shards count."},
    {"read_stacks", ur_py_read_stacks, METH_VARARGS,
     "read_stacks(memory, descriptor_addr, ids) -> dict[int, tuple[int, ...]]\n\n"
     "Program counters of each stack id (ids: packed u32)."},
    {"sweep", (PyCFunction)(void (*)(void))ur_py_sweep, METH_VARARGS | METH_KEYWORDS,
     "sweep(memory, allocs, root_ranges, root_values, *, stack_ids=b'', excluded=b'', "
     "cache_mb=0, release=None, threads=1, layout=b'', frozen=False, regions=None, "
     "value_regions=b'', default_region=0, region_ids=0, why=None, dominators=False, "
     "live=False) -> dict\n\n"
     "Mark from the roots, then fold the unreachable allocations into leaks (abi.h "
     "ur_leak_record); excluded block addresses are neither counted nor reported. "
     "frozen: the memory does not change (a frozen snapshot child): read what the walk "
     "needs first, then mark with `threads`, as over a released target's copy. "
     "live: the process runs on; mark with `threads`, each reading through a cache of its own. "
     "Graph mode (regions given: (begin, end, id) u64 triples labelling root words, "
     "value_regions one u32 per root value): 'graph' holds the root words that hit the heap "
     "(native/mark/retention.h ur_root_hit), with why=ADDRESS a shortest chain to its block, "
     "with dominators=True the dominator tree below the regions."},
    {"nudge_thread", ur_py_nudge_thread, METH_VARARGS,
     "nudge_thread(pid, tid): stop one thread of pid under ptrace and let it go at once, so "
     "that a futex wait it sleeps in restarts and re-reads its words (ESRCH: not pid's)."},
    {"pidfd_getfd", ur_py_pidfd_getfd, METH_VARARGS,
     "pidfd_getfd(pidfd, fd) -> int\n\n"
     "A duplicate of another process's descriptor fd (pidfd_getfd(2)); OSError on failure."},
    {"tee", ur_py_tee, METH_VARARGS,
     "tee(fd_in, fd_out, len, flags) -> int\n\n"
     "Copy up to len bytes of pipe fd_in into pipe fd_out without consuming them (tee(2)); "
     "the bytes copied, OSError on failure."},
    {"open_as_user", ur_py_open_as_user, METH_VARARGS,
     "open_as_user(uid, gid, groups, path) -> int\n\n"
     "An O_PATH descriptor of path, resolved with that user's rights in this thread alone "
     "(root only); a regular file only if the user may read it (OSError otherwise)."},
    {"pin_open", ur_py_pin_open, METH_VARARGS,
     "pin_open(pid): every thread of pid is held stopped (by the stopper process): its "
     "pages may be read with process_vm_readv's pin (native/scanner/pin_gate.h)."},
    {"pin_shut", ur_py_pin_shut, METH_VARARGS,
     "pin_shut(pid): a thread of pid is about to run: no new pin; returns once the reads "
     "that passed the gate are done."},
    {"present_ranges", ur_py_present_ranges, METH_VARARGS,
     "present_ranges(memory, ranges) -> bytes\n\n"
     "The parts of the sorted (begin, end) ranges (packed u64) that hold pages: present or "
     "swapped in a pid (all of them on a kernel without PAGEMAP_SCAN), held by a MemoryCopy."},
    {"read_spans", ur_py_read_spans, METH_VARARGS,
     "read_spans(pid, spans, out, threads) -> int\n\n"
     "Read the (begin, end) spans (packed u64) of a process into the writable buffer out, "
     "end to end, with up to `threads` threads (process_vm_readv); unreadable pages are left "
     "as they were. Returns the bytes read; OSError when the process cannot be read at all."},
    {"written_pages", ur_py_written_pages, METH_VARARGS,
     "written_pages(pid, ranges, clear, threads=1) -> bytes\n\n"
     "(begin, end) runs (packed u64, not sorted) of the ranges whose pages hold data and were "
     "written since they were write-protected, or are not protected at all (PAGEMAP_SCAN). "
     "clear: protect the written ones again; threads: walkers sharing the ranges by bytes. "
     "OSError from the pagemap."},
    {"track_arm", ur_py_track_arm, METH_VARARGS,
     "track_arm(uffd, pid, ranges) -> int\n\n"
     "Register the (begin, end, anonymous) ranges (packed u64) of process pid with its "
     "asynchronous userfaultfd uffd (a duplicate) and write-protect them, anonymous ones "
     "their runs of present pages only, found first, in 8 MiB pieces. A range refused stays "
     "untracked. Returns "
     "how many were armed; OSError when pid's pagemap cannot be opened."},
    {"track_disarm", ur_py_track_disarm, METH_VARARGS,
     "track_disarm(uffd, pid, ranges): unregister the (begin, end) ranges (packed u64) of "
     "process pid from uffd, clearing their write protection: its runs of pages in 8 MiB "
     "pieces, each stretch without pages in one call (all in pieces without pid's "
     "pagemap); errors are ignored."},
    {"remark", ur_py_remark, METH_VARARGS,
     "remark(candidates, state, store, runs, page_bytes, values, roots, pending) -> "
     "(int, bytes)\n\n"
     "The concurrent snapshot's re-mark (concurrent_mark.c): store the runs' bytes that lie "
     "in candidates; rescue the candidates the values and gone candidates' stores hit, "
     "transitively; the runs' other words (roots) that hit one are pending: (address, "
     "candidate) u64 pairs, sorted, replacing those given for pages read again. Returns how "
     "many were rescued and the pending words."},
    {"resolve", ur_py_resolve, METH_VARARGS,
     "resolve(candidates, state, store, pending, ranges, blocks) -> int\n\n"
     "Rescue, transitively, the candidates of pending words whose address lies in the sorted "
     "(begin, end) ranges or in one of the (begin, size) blocks. Returns how many."},
    {"size_map_pages", ur_py_size_map_pages, METH_VARARGS,
     "size_map_pages(memory, descriptor_addr, blocks) -> (bodies, pages)\n\n"
     "The whole pages of every size map, and the pages holding the map entries of the "
     "(begin, size) blocks (packed u64 pairs each)."},
    {"size_map_pages_around", ur_py_size_map_pages_around, METH_VARARGS,
     "size_map_pages_around(memory, descriptor_addr, ranges) -> bytes\n\n"
     "The pages (sorted, merged (begin, end) u64 pairs) of the size-map entries of every "
     "block that could hold an address of the (begin, end) ranges."},
    {"pairs_in", ur_py_pairs_in, METH_VARARGS,
     "pairs_in(candidates, allocs) -> bytes\n\n"
     "One byte per sorted (begin, size) candidate: 1 if allocs holds the same pair."},
    {"set_cache_budget", ur_py_set_cache_budget, METH_VARARGS,
     "set_cache_budget(bytes)\n\n"
     "The most the caches of memory copies (a copy snapshot, stopped mode's copy) may take "
     "from now on, besides half the available memory; 0: no budget."},
    {"cache_bound", ur_py_cache_bound, METH_NOARGS,
     "cache_bound() -> int\n\n"
     "What copies of target memory may take now: the budget, if set, or half the "
     "available memory, whichever is less."},
    {"heap_words", ur_py_heap_words, METH_VARARGS,
     "heap_words(words, spans) -> bytes\n\n"
     "The 8-byte values of words (read 8 bytes at a time) that lie inside one of spans "
     "(sorted, disjoint (begin, end) pairs, packed u64), packed u64 in their order."},
    {"code_words", ur_py_code_words, METH_VARARGS,
     "code_words(code, lo, hi) -> bytes\n\n"
     "The 8-byte values at every unaligned offset of code that lie in [lo, hi) (packed "
     "u64): pointers a JIT compiled into instructions."},
    {"dedup", ur_py_dedup, METH_VARARGS,
     "dedup(leaks, limit) -> list[tuple[int, ...]]\n\n"
     "Leaks (packed ur_leak_record, address order) with one backtrace merged into the first, "
     "sorted by total size (largest first, then lowest address), at most limit of them: "
     "a tuple of 9 ints each (begin, size, stack_id, referenced_count, referenced_size, "
     "similar_count, similar_size, similar_referenced_count, similar_referenced_size)."},
    {"walk_glibc_heap", ur_py_walk_glibc_heap, METH_VARARGS,
     "walk_glibc_heap(memory, minor, main_arena, mp, tcaches, anon, page_size[, present]) -> "
     "dict\n\n"
     "glibc 2.minor's live chunks (glibc_heap.h) read from memory (a pid or a MemoryCopy): "
     "present, packed u64 pairs: where a live process has pages (headers are looked for "
     "there only); "
     "allocs, packed (user address, usable size) u64 pairs in address order, and counts; "
     "error: why the walk was refused ('' when it was not), busy: an arena was locked."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_native",
    "Native core of the unreachable scanner: stop, snapshot, read and sweep a process.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
  if (PyType_Ready(&ur_session_type) < 0 || PyType_Ready(&ur_memory_copy_type) < 0 ||
      PyType_Ready(&ur_big_buffer_type) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Session", (PyObject *)&ur_session_type) < 0 ||
      PyModule_AddObjectRef(m, "MemoryCopy", (PyObject *)&ur_memory_copy_type) < 0 ||
      PyModule_AddObjectRef(m, "BigBuffer", (PyObject *)&ur_big_buffer_type) < 0 ||
      PyModule_AddFunctions(m, ur_abi_methods) < 0 || ur_abi_add_constants(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
