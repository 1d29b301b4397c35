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

/* A call made while the thread does the shim's own work (ur_tls.busy):
 * glibc allocating for pthread_create or pthread_getattr_np, a signal
 * handler interrupting the shim. It is registered like any other call, or
 * the registry would disagree with glibc once the block changed hands, but
 * it is announced in the thread's spare slot (its real slot may name the
 * operation this one is nested in), starts no helper, attaches no slot and
 * takes no backtrace. Only before the registry exists does it go straight
 * to glibc. */
static int nested_begin(struct ur_thread_slot **out) {
  for (;;) {
    uint32_t f = ur_load32(&ur_g.slow);
    if (f & (UR_SLOW_UNINIT | UR_SLOW_INERT)) return UR_PASS_THROUGH;
    if (!ur_tls.slot && (pid_t)ur_self_tid() == getpid()) {
      /* The main thread before its first own call (the constructor starting
       * the helper): attaching it calls nothing that allocates, and keeps a
       * single-threaded program in single-thread mode. */
      ur_thread_attach();
      continue;
    }
    /* Not attached (the helper thread, a thread attaching): never the
     * single thread, which updates the registry without locks. */
    if ((f & UR_SLOW_SINGLE) && !ur_tls.slot) {
      ur_go_multi();
      continue;
    }
    if ((f & UR_SLOW_GATE) && ur_load32(&ur_g.excl_tid) != ur_self_tid()) {
      int saved = errno;
      syscall(SYS_futex, &ur_g.slow, FUTEX_WAIT_PRIVATE, f, NULL, NULL, 0);
      errno = saved;
      continue;
    }
    *out = &ur_tls.dummy;
    return UR_PROCEED;
  }
}

/* Deal with whatever ur_g.slow flags. */
__attribute__((noinline)) int ur_slow_begin(struct ur_thread_slot **out, uint32_t op,
                                            const void *in, size_t in_size) {
  for (;;) {
    if (ur_tls.busy) return nested_begin(out);
    uint32_t f = ur_load32(&ur_g.slow);
    if (f & UR_SLOW_UNINIT) {
      ur_init();
      f = ur_load32(&ur_g.slow);
      if (f & UR_SLOW_UNINIT) return UR_PASS_THROUGH; /* our own init is allocating */
    }
    if (f & UR_SLOW_INERT) return UR_PASS_THROUGH;
    if (!ur_tls.slot) ur_thread_attach();
    if (f & UR_SLOW_HELPER) {
      /* Forked child: whoever clears the flag starts the replacement helper;
       * its own allocations find the flag clear and cannot recurse. */
      if (__atomic_fetch_and(&ur_g.slow, ~UR_SLOW_HELPER, __ATOMIC_ACQ_REL) & UR_SLOW_HELPER) {
        ur_tls.busy++;
        ur_helper_start();
        ur_tls.busy--;
      }
      continue;
    }
    struct ur_thread_slot *s = ur_tls.slot;
    ur_announce(s, op, in, in_size);
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* paired with membarrier in malloc_disable */
    f = ur_load32(&ur_g.slow);
    if (!(f & UR_SLOW_GATE) || ur_load32(&ur_g.excl_tid) == ur_tls.tid) {
      if (f & ~(UR_SLOW_GATE | UR_SLOW_SINGLE)) {
        ur_leave(s);
        continue;
      }
      *out = s;
      return UR_PROCEED;
    }
    /* malloc_disable() is in force: step out of the slot and sleep on the gate. */
    ur_leave(s);
    int saved = errno;
    syscall(SYS_futex, &ur_g.slow, FUTEX_WAIT_PRIVATE, f, NULL, NULL, 0);
    errno = saved;
  }
}

static inline __attribute__((always_inline)) uint32_t capture_here(size_t size) {
  if (size < ur_g.bt_min_size || size > ur_g.bt_max_size) return 0;
  if (ur_tls.busy) return 0; /* the shim's own call: not the program's site, and no re-entry */
  uintptr_t frames[UR_MAX_FRAMES];
  int saved = errno; /* libunwind's probes of memory set it (EAGAIN) */
  ur_tls.busy++;
  size_t n = ur_unwind_here(frames, ur_g.bt_frames);
  uint32_t id = ur_stacks_intern(frames, (uint32_t)n);
  ur_tls.busy--;
  errno = saved;
  return id;
}

__attribute__((noinline)) uint32_t ur_capture(size_t size) { return capture_here(size); }

/* glibc returned p: name it in the slot, register it, leave. */
static inline __attribute__((always_inline)) void *finish(struct ur_thread_slot *s, void *p,
                                                          size_t size) {
  if (p) {
    ur_announce_out(s, p, size);
    ur_registry_insert(p, size, ur_maybe_capture(size));
    ur_note_own(p);
  }
  ur_leave(s);
  return p;
}

/* The hot paths announce and check the flags inline; anything else (first
 * call of a thread, re-entry, a flag set) goes through these, out of line. */
__attribute__((noinline)) static void *malloc_slow(size_t n) {
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return __libc_malloc(n);
  return finish(s, __libc_malloc(n), n);
}

/* What the hot path does not: backtraces, the out-of-line registry. The
 * hot path tail-calls it, so the backtrace is taken with one shim frame on
 * the stack (this one) instead of three. */
__attribute__((noinline)) static void *malloc_finish_slow(struct ur_thread_slot *s, void *p,
                                                          size_t n) {
  if (p) {
    ur_announce_out(s, p, n);
    uint32_t id = ur_backtraces_on() ? capture_here(n) : 0;
    if (!ur_registry_try_insert(p, n, id, ur_single())) ur_registry_insert(p, n, id);
  }
  ur_leave(s);
  return p;
}

__attribute__((noinline)) static void free_slow(void *p) {
  struct ur_thread_slot *s = ur_begin(UR_OP_FREE, p, 0);
  if (UR_UNLIKELY(!s)) {
    __libc_free(p);
    return;
  }
  ur_registry_remove(p);
  __libc_free(p);
  ur_leave(s);
}

/* Only the slot and the size live across glibc's malloc, and nothing is
 * called after it on the fast path: few registers to save. The flags are read
 * again after glibc returns; any read after the announcement is as good. */
static inline __attribute__((always_inline)) void *do_malloc(size_t n) {
  struct ur_thread_slot *s = ur_tls.slot;
  if (UR_UNLIKELY(s == NULL || ur_tls.busy)) return malloc_slow(n);
  ur_announce(s, UR_OP_MALLOC, NULL, 0);
  __atomic_signal_fence(__ATOMIC_SEQ_CST); /* paired with membarrier (ur_go_multi, malloc_disable) */
  if (UR_UNLIKELY(ur_load32(&ur_g.slow) & ~UR_SLOW_SINGLE)) {
    ur_leave(s);
    return malloc_slow(n);
  }
  void *p = __libc_malloc(n);
  if (UR_UNLIKELY(p == NULL) || ur_backtraces_on()) return malloc_finish_slow(s, p, n);
  ur_announce_out(s, p, n);
  if (UR_UNLIKELY(!ur_registry_try_insert(p, n, 0, ur_single())))
    return malloc_finish_slow(s, p, n); /* named in the slot: the slow path registers it */
  ur_leave(s);
  return p;
}

static inline __attribute__((always_inline)) void do_free(void *p) {
  struct ur_thread_slot *s = ur_tls.slot;
  if (UR_UNLIKELY(s == NULL || ur_tls.busy)) return free_slow(p);
  ur_announce(s, UR_OP_FREE, p, 0);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  uint32_t f = ur_load32(&ur_g.slow);
  if (UR_UNLIKELY(f & ~UR_SLOW_SINGLE)) {
    ur_leave(s);
    return free_slow(p);
  }
  if (UR_UNLIKELY(!ur_registry_try_remove(p, (f & UR_SLOW_SINGLE) != 0))) ur_registry_remove(p);
  __libc_free(p);
  ur_leave(s);
}

static void *do_memalign(size_t align, size_t n) {
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_memalign(align, n);
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return __libc_memalign(align, n);
  return finish(s, __libc_memalign(align, n), n);
}

UR_EXPORT void *malloc(size_t n) {
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) return ur_dbg_malloc(n);
  return do_malloc(n);
}

UR_EXPORT void free(void *p) {
  if (!p) return;
  if (UR_UNLIKELY(ur_load32(&ur_g.debug)) && ur_dbg_ready()) {
    ur_dbg_free(p);
    return;
  }
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
  if (UR_UNLIKELY(!s)) return __libc_calloc(n, m);
  return finish(s, __libc_calloc(n, m), total);
}

/* glibc 2.36 exports malloc_usable_size only as a weak symbol with no
 * __libc_ twin, so it is looked up in libc itself (syms.c), never through
 * dlsym: the next definition after ours is not always glibc's (a program
 * linked with jemalloc finds jemalloc's first, which crashes on glibc's
 * blocks), and dlsym allocates and rewrites the thread's dlerror state. */
size_t ur_real_usable_size(void *p) {
  size_t (*f)(void *) = __atomic_load_n(&ur_syms.usable_size, __ATOMIC_ACQUIRE);
  if (UR_UNLIKELY(!f)) {
    ur_syms_init();
    f = __atomic_load_n(&ur_syms.usable_size, __ATOMIC_ACQUIRE);
    if (!f) return 0;
  }
  return f(p);
}

/* A block that must move is moved here, not by glibc: glibc's realloc frees
 * the old block (its free list overwrites the first 16 bytes) before it
 * returns the new one, so a thread stopped inside it would hold the only
 * full copy of the block's pointers in a block the registry does not know
 * yet. Here the new block is announced before the copy and the old one stays
 * intact until the copy is registered, so every stop sees one complete copy.
 * Growth that glibc could have done in place or by mremap becomes a copy. */
static void *move_block(struct ur_thread_slot *s, void *p, size_t n, size_t old_usable) {
  void *q = __libc_malloc(n);
  if (!q) return NULL;
  ur_announce_out(s, q, n);
  __builtin_memcpy(q, p, old_usable < n ? old_usable : n);
  ur_registry_insert(q, n, ur_maybe_capture(n));
  ur_registry_remove(p);
  __libc_free(p);
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
  if (UR_UNLIKELY(!s)) return __libc_realloc(p, n);
  uint64_t old_size;
  uint32_t old_id;
  void *q;
  if (UR_UNLIKELY(!ur_registry_find(p, &old_size, &old_id))) {
    /* Not a block the registry knows (already freed, never allocated):
     * glibc decides, as without the shim. A realloc of a freed block
     * survives in glibc 2.36, and moving it here freed it a second time. */
    q = __libc_realloc(p, n);
    if (q) {
      ur_announce_out(s, q, n);
      ur_registry_set(q, n, ur_maybe_capture(n));
    }
    ur_leave(s);
    return q;
  }
  size_t usable = ur_real_usable_size(p);
  if (n <= usable || usable == 0) {
    /* Fits: glibc shrinks in place (mremap shrinks an mmap'ed chunk in place).
     * usable == 0: libc's malloc_usable_size was not found; let glibc do it. */
    q = __libc_realloc(p, n);
    if (q == p) {
      ur_announce_out(s, q, n);
      /* Every realloc re-records the site, as bionic does since P. */
      ur_registry_set(q, n, ur_maybe_capture(n));
    } else if (q) {
      ur_announce_out(s, q, n);
      ur_registry_insert(q, n, ur_maybe_capture(n));
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
  if (UR_UNLIKELY(!s)) return __libc_valloc(n);
  return finish(s, __libc_valloc(n), n);
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
  if (UR_UNLIKELY(!s)) return __libc_pvalloc(n);
  return finish(s, __libc_pvalloc(n), rounded);
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
