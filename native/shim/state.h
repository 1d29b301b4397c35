/*
 * State shared by the shim's translation units (defined in state.c). Nothing
 * here is part of the scanner ABI (that is unreachable/abi.h); this is the
 * shim's private view. A leaf: it includes system headers and abi.h only,
 * so every module can include it without depending on any other.
 */
#ifndef UR_STATE_H
#define UR_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "unreachable/abi.h"

#define UR_EXPORT __attribute__((visibility("default")))
#define UR_LIKELY(x) __builtin_expect(!!(x), 1)
#define UR_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define UR_NUM_SHARDS 256u
#define UR_MAX_THREADS 8192u
#define UR_STACK_CAPACITY (1u << 20)
#define UR_MAX_FRAMES 256u

/* glibc's real allocator, exported under these names so an interposer can
 * reach it without dlsym (dlsym itself allocates). */
void *__libc_malloc(size_t n);
void __libc_free(void *p);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void *__libc_valloc(size_t n);
void *__libc_pvalloc(size_t n);

/* ur_g.slow bits: any bit set sends entry points down the slow path, so the
 * hot path pays one relaxed load for all of these conditions. */
#define UR_SLOW_UNINIT 1u /* registry not initialised yet */
#define UR_SLOW_INERT 2u  /* bad options or no memory: pass everything to glibc */
#define UR_SLOW_GATE 4u   /* malloc_disable() in force */
#define UR_SLOW_HELPER 8u /* forked child: start a snapshot helper */
/* Not a slow-path reason: only one thread has ever used the registry, so it
 * runs without locks. Cleared (ur_go_multi) before a second thread touches it. */
#define UR_SLOW_SINGLE 16u
/* A thread waits out the calls others are inside (between_calls.h): each
 * thread's next call comes down the slow path to say it is between calls. */
#define UR_SLOW_BETWEEN_CALLS 128u
/* Not slow-path reasons either: malloc_debug's per-call options are on
 * (DEBUG: malloc and free leave their inline paths for the debug path),
 * backtraces are on (BACKTRACE: malloc leaves its inline path for the one
 * that takes the backtrace; free needs nothing else). Testing them in the
 * one flag load the inline paths make anyway spares a load and a branch
 * per call. Set once, by ur_init. */
#define UR_SLOW_DEBUG 32u
#define UR_SLOW_BACKTRACE 64u
/* The bits that do not stop ur_begin from proceeding. */
#define UR_SLOW_NOT_A_REASON (UR_SLOW_SINGLE | UR_SLOW_DEBUG | UR_SLOW_BACKTRACE)

/* ur_g.debug: malloc_debug's per-call options (debug.c). Non-zero sends every
 * entry point to the debug path; UR_DBG_UNINIT until ur_init has decided. */
#define UR_DBG_UNINIT 1u
#define UR_DBG_ON 2u

struct ur_globals {
  uint32_t slow;
  uint32_t debug;
  uint32_t pending;      /* signal requests for the helper (helper.h UR_REQ_*) */
  uint32_t init_tid;     /* thread running ur_init, 0 when none */
  uint32_t bt_frames;    /* backtrace=N (0: no backtrace option) */
  uint32_t bt_active;    /* capture currently on (toggled by signal) */
  /* Some block of level-0 size may be in a shard (size_map.h
   * ur_size_map_take): backtraces or malloc_debug on, or a map that could
   * not be made. Never cleared. */
  uint32_t small_in_shards;
  uint32_t disable_depth;
  uint32_t disable_lock; /* serialises malloc_disable callers; names its holder (lock.h) */
  size_t bt_min_size, bt_max_size;
  uintptr_t text_lo, text_hi; /* the shim's own code, skipped in backtraces */
  struct ur_shard *shards;
  struct ur_thread_slot *threads;
  struct ur_thread_slot *single_slot; /* the one thread while UR_SLOW_SINGLE */
  uint32_t multi_lock;
  uint32_t unwinders;   /* threads inside libunwind (unwind.h) */
  uint32_t bias_ok; /* membarrier works: threads may own registry shards (registry.c) */
  struct ur_stack_table *stacks;
  uint32_t *helper_cmd;
  char *options;
};

extern struct ur_globals ur_g;

/* The words fork's handlers write, on a page of their own that a forked
 * child does not share (MADV_WIPEONFORK): fork write-protects every page it
 * shares copy-on-write, so each of these the parent wrote there after a fork
 * would cost it a page fault and a page copy per fork (docs/shim.md, "fork").
 * The child gets the page zeroed, so 0 means free/unowned/none in each, and
 * its fork handler sets the rest. Until ur_init makes the page, and where
 * the kernel has no MADV_WIPEONFORK, ur_fork points at an ordinary copy. */
struct ur_fork_words {
  uint32_t shard_lock[UR_NUM_SHARDS]; /* each shard's lock (lock.h); shards' own stay 0 */
  uint32_t shard_bias[UR_NUM_SHARDS]; /* each shard's owner (registry.h) */
  uint32_t bias_before[UR_NUM_SHARDS]; /* owners before lock_all (registry.c) */
  uint32_t excl_tid;    /* thread holding every lock (malloc_disable or fork), 0 if none */
  uint32_t unwind_gate; /* tid of a forking thread keeping others out of libunwind, 0 open */
  uint32_t stacks_lock; /* the stack table's (stacks.c) */
  uint8_t in_fork[UR_MAX_THREADS]; /* by thread slot: inside fork's handlers (shim.c) */
};
extern struct ur_fork_words *ur_fork;
extern struct ur_descriptor unreachable_descriptor;

/* Per-thread state. initial-exec so the hot path is one %fs-relative load. */
struct ur_tls {
  struct ur_thread_slot *slot; /* NULL until the thread's first tracked call */
  uint32_t tid;
  uint32_t busy;               /* >0: inside the shim's own work (entry.c nested_begin) */
  uint32_t shard_token;        /* slot index + 1 (0: no shared slot): owner id in registry.c */
  uint32_t in_getattr;         /* >0: inside pthread_getattr_np (threads.c) */
  uint32_t own_alloc;          /* >0: starting the helper; its blocks are the shim's (helper.h) */
  uint32_t unwinding;          /* >0: inside libunwind (a signal handler may nest) */
  uint16_t mask_depth;         /* libunwind's signal-blocking sections open (sandbox.c) */
  uint16_t mask_real;          /* the outermost one's calls are made (sandbox.c) */
  struct ur_shard *resizing;   /* the shard whose table this thread rebuilds (registry.c) */
  /* The spare slot, where a call nested in another on this thread (or in
   * the shim's own work) announces, leaving the thread's slot alone
   * (entry.c nested_begin). */
  struct ur_thread_slot dummy;
  /* The thread's slot when every shared one was taken: its own, so that
   * its nested calls still take the spare. No scan reads it. */
  struct ur_thread_slot unshared;
};

extern __thread struct ur_tls ur_tls __attribute__((tls_model("initial-exec")));

static inline uint32_t ur_load32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

/* ur_tls.slot, with the TLS offset loaded from the GOT again: after a call,
 * plain C keeps that offset in a callee-saved register, whose push and pop
 * cost malloc and free a store and a load (malloc_api.c do_malloc).
 * Volatile, so that it stays where it is written, after the call. */
static inline struct ur_thread_slot *ur_tls_slot_again(void) {
#if defined(__x86_64__)
  struct ur_thread_slot *s;
  _Static_assert(__builtin_offsetof(struct ur_tls, slot) == 0, "slot first");
  __asm__ volatile("movq ur_tls@gottpoff(%%rip), %0\n\tmovq %%fs:(%0), %0" : "=r"(s));
  return s;
#else
  return ur_tls.slot;
#endif
}

/* Return the thread's tid, cached in TLS. */
uint32_t ur_self_tid(void);

/* write(2) a whole buffer to stderr, retrying short writes; never allocates. */
void ur_write_stderr(const char *buf, size_t len);

#endif
