/*
 * malloc_debug's entry points (see debug.h), following bionic's
 * malloc_debug.cpp: same order of checks. Each feature lives in its own
 * file (debug_guard.c, debug_pointers.c, debug_record.c); differences from
 * bionic are documented in docs/malloc_debug.md.
 */
#include "debug.h"

#include <errno.h>
#include <string.h>

#include "debug_config.h"
#include "debug_guard.h"
#include "debug_log.h"
#include "debug_pointers.h"
#include "debug_record.h"
#include "entry.h"
#include "registry.h"
#include "shim.h"
#include "state.h"
#include "syms.h"

int ur_dbg_ready_slow(void) {
  if (ur_tls.busy) return 0;
  ur_init();
  return ur_load32(&ur_g.debug) == UR_DBG_ON;
}

static void *finish_alloc(struct ur_thread_slot *s, void *p, size_t n) {
  if (p) {
    ur_announce_out(s, p, n);
    ur_registry_insert(p, n, ur_maybe_capture(s, n));
    ur_note_own(p);
  }
  ur_leave(s);
  return p;
}

static void *dbg_malloc(size_t n) {
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_libc.malloc(n);
  void *p = ur_alloc_block(n, 0, false);
  ur_fill_alloc(p);
  return finish_alloc(s, p, n);
}

void *ur_dbg_malloc(size_t n) {
  void *p = dbg_malloc(n);
  ur_rec_add(UR_REC_MALLOC, UR_MANGLE(p), 0, n);
  return p;
}

void *ur_dbg_calloc(size_t n, size_t m) {
  size_t total = n * m; /* the caller checked for overflow */
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_libc.calloc(n, m);
  void *p = finish_alloc(s, ur_alloc_block(total, 0, true), total);
  ur_rec_add(UR_REC_CALLOC, UR_MANGLE(p), n, m);
  return p;
}

void *ur_dbg_memalign(size_t align, size_t n) {
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_libc.memalign(align, n);
  void *p = ur_alloc_block(n, align, false);
  ur_fill_alloc(p);
  finish_alloc(s, p, n);
  ur_rec_add(UR_REC_MEMALIGN, UR_MANGLE(p), align, n);
  return p;
}

/* p (registered, already out of the registry) goes back: guards checked,
 * tagged free, filled, then held by free_track or given to glibc. */
static void release_block(void *p, uint32_t stack_id, bool guards) {
  size_t bytes;
  if (ur_debug.header) {
    struct ur_hdr *h = ur_hdr_of(p);
    if (guards) ur_check_guards(p, h, stack_id);
    h->tag = DEBUG_FREE_TAG;
    bytes = h->usable;
  } else {
    bytes = ur_real_usable_size(p);
  }
  if (ur_debug.fill_free) {
    size_t f = bytes < ur_debug.fill_free ? bytes : ur_debug.fill_free;
    memset(p, FILL_FREE_VALUE, f);
    /* A held block is not registered, and a thread arena or mmap'ed chunk
     * with nothing registered is a root to the scanner: leave no stale
     * pointer in the part fill_on_free=N did not cover. */
    if (ur_debug.ft_cap && f < bytes) memset((uint8_t *)p + f, 0, bytes - f);
  }
  if (ur_debug.ft_cap) {
    uint64_t frames[UR_MAX_FRAMES];
    size_t n = ur_debug.ft_frames ? ur_debug_unwind(frames, ur_debug.ft_frames) : 0;
    union {
      struct ur_ft_entry e;
      uint8_t raw[sizeof(struct ur_ft_entry) + UR_MAX_FRAMES * sizeof(uint64_t)];
    } ev;
    int held = ur_ft_push(p, frames, n, &ev.e);
    if (held == 0) return;
    if (held > 0) {
      p = (void *)UR_UNMANGLE(ev.e.ptr);
      if (!ur_ft_verify((uintptr_t)p, ev.e.frames, ev.e.nframes)) return; /* leaked on purpose */
    }
  }
  ur_libc.free(ur_orig_of(p));
}

static void dbg_free(void *p) {
  struct ur_thread_slot *s = ur_begin(UR_OP_FREE, p, 0);
  if (UR_UNLIKELY(!s)) {
    ur_libc.free(p);
    return;
  }
  /* free keeps errno, as glibc's does since 2.33; free_track's first unwind
   * in a thread leaves EAGAIN behind (libunwind probing memory). */
  int saved = errno;
  uint64_t size;
  uint32_t id;
  if (!ur_registry_take(p, &size, &id)) {
    if (!ur_bad_pointer(p, "free")) ur_libc.free(p);
  } else if (ur_bad_tag(p, "free")) {
    ur_registry_insert(p, size, id); /* left alone, as bionic does */
  } else {
    release_block(p, id, true);
  }
  ur_leave(s);
  errno = saved;
}

void ur_dbg_free(void *p) {
  ur_rec_add(UR_REC_FREE, UR_MANGLE(p), 0, 0);
  dbg_free(p);
}

void *ur_dbg_realloc(void *p, size_t n) {
  if (!p) {
    void *q = dbg_malloc(n);
    ur_rec_add(UR_REC_REALLOC, UR_MANGLE(q), UR_MANGLE(NULL), n);
    return q;
  }
  if (n == 0) { /* glibc frees and returns NULL */
    ur_rec_add(UR_REC_REALLOC, UR_MANGLE(NULL), UR_MANGLE(p), 0);
    dbg_free(p);
    return NULL;
  }
  struct ur_thread_slot *s = ur_begin(UR_OP_REALLOC, p, n);
  if (UR_UNLIKELY(!s)) return ur_libc.realloc(p, n);
  int64_t ri = ur_rec_reserve();
  void *q = NULL;
  uint64_t size;
  uint32_t id;
  size_t prev;
  if (!ur_registry_find(p, &size, &id)) {
    if (!ur_bad_pointer(p, "realloc")) q = ur_libc.realloc(p, n); /* never went through us */
    /* The program has it now (a header-less block has no tag to check). */
    if (q && !ur_debug.header) {
      ur_announce_out(s, q, n);
      ur_registry_set(q, n, ur_maybe_capture(s, n));
    }
    goto out;
  }
  if (ur_bad_tag(p, "realloc")) goto out;
  if (ur_debug.header) {
    struct ur_hdr *h = ur_hdr_of(p);
    ur_check_guards(p, h, id);
    if (n == h->size || n < h->usable) { /* same size, or shrinking: in place */
      h->size = n;
      if (ur_debug.rear) {
        h->usable = n;
        memset((uint8_t *)p + n, REAR_GUARD_VALUE, ur_debug.rear);
      }
      ur_announce_out(s, p, n);
      ur_registry_set(p, n, ur_maybe_capture(s, n)); /* every realloc re-records the site */
      q = p;
      goto out;
    }
    prev = h->usable;
  } else {
    size_t usable = ur_real_usable_size(p), real;
    if (__builtin_add_overflow(n, ur_debug.expand, &real)) {
      errno = ENOMEM;
      goto out;
    }
    if (usable && real <= usable) { /* fits: glibc shrinks in place */
      q = ur_libc.realloc(p, real);
      if (q) {
        ur_announce_out(s, q, n);
        if (q == p) {
          ur_registry_set(q, n, ur_maybe_capture(s, n));
        } else {
          ur_registry_insert(q, n, ur_maybe_capture(s, n));
          ur_registry_remove(p);
        }
      }
      goto out;
    }
    prev = usable;
  }
  /* Move: the new block is announced and registered before the old one goes
   * (malloc_api.c move_block explains why), and the old one takes the free
   * path: fill_on_free, free_track. */
  q = ur_alloc_block(n, 0, false);
  if (!q) {
    errno = ENOMEM;
    goto out;
  }
  ur_fill_alloc(q); /* then the copy: what lies above the old usable size stays 0xeb */
  ur_announce_out(s, q, n);
  size_t qusable = ur_usable_of(q);
  memcpy(q, p, prev < qusable ? prev : qusable);
  ur_registry_insert(q, n, ur_maybe_capture(s, n));
  ur_registry_remove(p);
  release_block(p, id, false); /* guards were checked above */
out:
  ur_rec_commit(ri, UR_REC_REALLOC, UR_MANGLE(q), UR_MANGLE(p), n);
  ur_leave(s);
  return q;
}

size_t ur_dbg_usable_size(void *p) {
  if (!p) return 0;
  struct ur_thread_slot *s = ur_begin(UR_OP_INTERNAL, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_real_usable_size(p);
  int saved = errno; /* a report's backtrace may change it; glibc's never does */
  uint64_t size;
  uint32_t id;
  size_t r;
  if (!ur_registry_find(p, &size, &id))
    r = ur_bad_pointer(p, "malloc_usable_size") ? 0 : ur_real_usable_size(p);
  else if (ur_bad_tag(p, "malloc_usable_size"))
    r = 0;
  else
    r = (size_t)size; /* what a scan reads: see malloc_usable_size in malloc_api.c */
  ur_leave(s);
  errno = saved;
  return r;
}
