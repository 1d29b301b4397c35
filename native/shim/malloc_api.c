/*
 * The interposed allocator entry points. Each one announces what it is doing
 * in the thread's slot, calls glibc's real allocator (__libc_*), and keeps the
 * registry exact. Anything unusual (not initialised, inert, disabled, forked
 * child without a helper, re-entry from the shim itself) leaves the hot path.
 */
#include <errno.h>
#include <linux/futex.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "debug.h"
#include "entry.h"
#include "helper.h"
#include "registry.h"
#include "stacks.h"
#include "syms.h"
#include "threads.h"
#include "unwind.h"

/* glibc returned p: name it in the slot, register it, leave. */
static inline __attribute__((always_inline)) void *finish(struct ur_thread_slot *s, void *p,
                                                          size_t size) {
  if (p) {
    ur_announce_out(s, p, size);
    ur_registry_insert(p, size, ur_maybe_capture(s, size));
    ur_note_own(p);
  }
  ur_leave(s);
  return p;
}

/* Everything the inline paths leave (first call of a thread, re-entry, a
 * flag set, malloc_debug or backtraces on): the debug path
 * first, as every entry point takes it, else the protocol's slow start.
 * malloc tail-calls it, so a backtrace is taken here with one shim frame
 * on the stack. */
__attribute__((noinline)) static void *malloc_slow(size_t n) {
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_malloc(n);
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_libc.malloc(n);
  void *p = ur_libc.malloc(n);
  if (p) {
    ur_announce_out(s, p, n);
    uint32_t id =
        ur_g.bt_frames && __atomic_load_n(&ur_g.bt_active, __ATOMIC_RELAXED) && !ur_nested(s)
            ? ur_capture_here(n)
            : 0;
    /* The lock-free attempt only in the thread's own slot: a nested call
     * (the spare slot) may have interrupted one that holds its shard. */
    if (s == &ur_tls.dummy || !ur_registry_try_insert(p, n, id, ur_single()))
      ur_registry_insert(p, n, id);
    ur_note_own(p);
  }
  ur_leave(s);
  return p;
}

/* What malloc's hot path does not: a shard, a map to make. Like the hot
 * path, it names no block in the slot: p lives in a register or this
 * frame until it is returned. */
__attribute__((noinline)) static void *malloc_finish_slow(void *p, size_t n) {
  if (!ur_registry_try_insert(p, n, 0, ur_single())) ur_registry_insert(p, n, 0);
  ur_leave_op(ur_tls_slot_again());
  return p;
}

__attribute__((noinline)) static void free_slow(void *p) {
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) {
    ur_dbg_free(p);
    return;
  }
  struct ur_thread_slot *s = ur_begin(UR_OP_FREE, p, 0);
  if (UR_UNLIKELY(!s)) {
    ur_libc.free(p);
    return;
  }
  if (s == &ur_tls.dummy || !ur_registry_try_remove(p, ur_single())) ur_registry_remove(p);
  ur_libc.free(p);
  ur_leave(s);
}

/* Only the size lives across glibc's malloc, and nothing is called after
 * it on the fast path: one register to save. The slot is loaded again
 * after glibc's call (ur_tls_slot_again; a thread's slot never changes
 * once set) rather than kept in a callee-saved register, whose push and
 * pop are a store and a load: the inline paths wait mostly for room in the
 * store buffer, behind the program's and glibc's stores to cold lines, so
 * each store saved counts. One load of
 * ur_g.slow, after the announcement (any read after it is as good), says
 * whether anything at all is unusual, malloc_debug and backtraces included
 * (UR_SLOW_DEBUG, UR_SLOW_BACKTRACE: free needs nothing else for a
 * backtrace). The inline paths announce the op alone and name no block
 * (threads.h ur_announce_op): a stopped scan finds the block in the
 * thread's registers or frame, wherever the registry holds it. */
static inline __attribute__((always_inline)) void *do_malloc(size_t n) {
  struct ur_thread_slot *s = ur_tls.slot;
  if (UR_UNLIKELY(s == NULL || (ur_tls.busy | ur_slot_op(s)))) return malloc_slow(n);
  ur_announce_op(s, UR_OP_MALLOC);
  __atomic_signal_fence(__ATOMIC_SEQ_CST); /* paired with membarrier (ur_go_multi, malloc_disable) */
  if (UR_UNLIKELY(ur_load32(&ur_g.slow) & ~UR_SLOW_SINGLE)) {
    ur_leave_op(s);
    return malloc_slow(n);
  }
  void *p = ur_libc.malloc(n);
  if (UR_UNLIKELY(p == NULL)) {
    ur_leave_op(ur_tls_slot_again());
    return NULL;
  }
  /* Only a block for a map that exists is registered here; anything else
   * (a shard, a map to make) is the slow path's, so malloc keeps the
   * shards' registers out of its frame. */
  if (UR_UNLIKELY(!ur_registry_try_insert_map(p, n))) return malloc_finish_slow(p, n);
  ur_leave_op(ur_tls_slot_again());
  return p;
}

static inline __attribute__((always_inline)) void do_free(void *p) {
  struct ur_thread_slot *s = ur_tls.slot;
  if (UR_UNLIKELY(s == NULL || (ur_tls.busy | ur_slot_op(s)))) return free_slow(p);
  ur_announce_op(s, UR_OP_FREE);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  uint32_t f = ur_load32(&ur_g.slow);
  if (UR_UNLIKELY(f & ~(UR_SLOW_SINGLE | UR_SLOW_BACKTRACE))) {
    ur_leave_op(s);
    return free_slow(p);
  }
  if (UR_UNLIKELY(!ur_registry_try_remove(p, (f & UR_SLOW_SINGLE) != 0))) ur_registry_remove(p);
  ur_libc.free(p);
  ur_leave_op(ur_tls_slot_again()); /* loaded again, as in do_malloc: no register to save */
}

static void *do_memalign(size_t align, size_t n) {
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_memalign(align, n);
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_libc.memalign(align, n);
  return finish(s, ur_libc.memalign(align, n), n);
}

UR_EXPORT void *malloc(size_t n) { return do_malloc(n); }

UR_EXPORT void free(void *p) {
  if (!p) return;
  do_free(p);
}

UR_EXPORT void *calloc(size_t n, size_t m) {
  size_t total;
  if (__builtin_mul_overflow(n, m, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_calloc(n, m);
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_libc.calloc(n, m);
  return finish(s, ur_libc.calloc(n, m), total);
}

/* A block that must move is moved here, not by glibc: glibc's realloc frees
 * the old block (its free list overwrites the first 16 bytes) before it
 * returns the new one, so a thread stopped inside it would hold the only
 * full copy of the block's pointers in a block the registry does not know
 * yet. Here the new block is announced before the copy and the old one stays
 * intact until the copy is registered, so every stop sees one complete copy.
 * Growth that glibc could have done in place or by mremap becomes a copy. */
static void *move_block(struct ur_thread_slot *s, void *p, size_t n, size_t old_usable) {
  void *q = ur_libc.malloc(n);
  if (!q) return NULL;
  ur_announce_out(s, q, n);
  __builtin_memcpy(q, p, old_usable < n ? old_usable : n);
  ur_registry_insert(q, n, ur_maybe_capture(s, n));
  ur_registry_remove(p);
  ur_libc.free(p);
  return q;
}

UR_EXPORT void *realloc(void *p, size_t n) {
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_realloc(p, n);
  if (!p) return do_malloc(n);
  if (n == 0) { /* glibc frees and returns NULL (REALLOC_ZERO_BYTES_FREES) */
    do_free(p);
    return NULL;
  }
  struct ur_thread_slot *s = ur_begin(UR_OP_REALLOC, p, n);
  if (UR_UNLIKELY(!s)) return ur_libc.realloc(p, n);
  uint64_t old_size;
  uint32_t old_id;
  void *q;
  if (UR_UNLIKELY(!ur_registry_find(p, &old_size, &old_id))) {
    /* Not a block the registry knows (already freed, never allocated):
     * glibc decides, as without the shim. A realloc of a freed block
     * survives in glibc 2.36, and moving it here freed it a second time. */
    q = ur_libc.realloc(p, n);
    if (q) {
      ur_announce_out(s, q, n);
      ur_registry_set(q, n, ur_maybe_capture(s, n));
    }
    ur_leave(s);
    return q;
  }
  size_t usable = ur_real_usable_size(p);
  if (n <= usable || usable == 0) {
    /* Fits: glibc shrinks in place (mremap shrinks an mmap'ed chunk in place).
     * usable == 0: libc's malloc_usable_size was not found; let glibc do it. */
    q = ur_libc.realloc(p, n);
    if (q == p) {
      ur_announce_out(s, q, n);
      /* Every realloc re-records the site, as bionic does since P. */
      ur_registry_set(q, n, ur_maybe_capture(s, n));
    } else if (q) {
      ur_announce_out(s, q, n);
      ur_registry_insert(q, n, ur_maybe_capture(s, n));
      ur_registry_remove(p);
    }
  } else {
    q = move_block(s, p, n, usable);
  }
  ur_leave(s); /* q == NULL: p is untouched and still registered */
  return q;
}

UR_EXPORT void *reallocarray(void *p, size_t n, size_t m) {
  size_t total;
  if (__builtin_mul_overflow(n, m, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, total);
}

static int is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

UR_EXPORT int posix_memalign(void **out, size_t align, size_t n) {
  if (align % sizeof(void *) != 0 || !is_pow2(align / sizeof(void *))) return EINVAL;
  /* The result reports the error; errno is left as glibc's leaves it: ENOMEM
   * after a failure (programs check it), untouched after a success. */
  int saved = errno;
  void *p = do_memalign(align, n);
  if (!p) {
    errno = ENOMEM;
    return ENOMEM;
  }
  *out = p;
  errno = saved;
  return 0;
}

UR_EXPORT void *memalign(size_t align, size_t n) { return do_memalign(align, n); }

/* As the installed glibc: from 2.38 the alignment must be a power of two;
 * before, aligned_alloc is memalign, which rounds it up to one. */
UR_EXPORT void *aligned_alloc(size_t align, size_t n) {
  if (!ur_syms.aligned_alloc_strict) ur_syms_init();
  if (ur_syms.aligned_alloc_strict && !is_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return do_memalign(align, n);
}

UR_EXPORT void *valloc(size_t n) {
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_memalign((size_t)sysconf(_SC_PAGESIZE), n);
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_libc.valloc(n);
  return finish(s, ur_libc.valloc(n), n);
}

UR_EXPORT void *pvalloc(size_t n) {
  size_t ps = (size_t)sysconf(_SC_PAGESIZE), rounded;
  if (__builtin_add_overflow(n, ps - 1, &rounded)) {
    errno = ENOMEM;
    return NULL;
  }
  rounded &= ~(ps - 1); /* the caller owns the whole rounded size */
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_memalign(ps, rounded);
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_libc.pvalloc(n);
  return finish(s, ur_libc.pvalloc(n), rounded);
}


/* The size asked for, as ASan and valgrind answer, not glibc's rounded-up
 * size: a scan reads a block's requested bytes only, so a pointer the program
 * kept in glibc's slack past them would go unseen and its target look leaked.
 * Blocks the registry does not know (from before the shim started) get
 * glibc's answer. */
UR_EXPORT size_t malloc_usable_size(void *p) {
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_usable_size(p);
  if (!p) return 0;
  struct ur_thread_slot *s = ur_begin(UR_OP_INTERNAL, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_real_usable_size(p);
  uint64_t size;
  uint32_t id;
  size_t r = ur_registry_find(p, &size, &id) ? (size_t)size : ur_real_usable_size(p);
  ur_leave(s);
  return r;
}
