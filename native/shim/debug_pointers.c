/*
 * Pointers the program gives back (bionic's PointerData): free_track's FIFO
 * of blocks held back after free, checked for writes when they leave it,
 * and the reports on pointers that are not live blocks (verify_pointers,
 * use after free, a damaged header tag).
 */
#include "debug_pointers.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "debug_config.h"
#include "debug_guard.h"
#include "debug_log.h"
#include "lock.h"
#include "state.h"
#include "syms.h"

static inline struct ur_ft_entry *ft_at(size_t i) {
  return (struct ur_ft_entry *)(ur_debug.ft + (i % ur_debug.ft_cap) * ur_debug.ft_stride);
}

/* Find p among the blocks held back; copies its free backtrace. */
static bool ft_find(const void *p, uint64_t *frames, size_t *nframes) {
  uint64_t key = UR_MANGLE(p);
  bool found = false;
  /* false: a handler inside the FIFO's owner */
  if (!ur_tid_lock(&ur_debug.ft_lock, ur_self_tid())) return false;
  for (size_t i = 0; i < ur_debug.ft_count && !found; i++) {
    struct ur_ft_entry *e = ft_at(ur_debug.ft_head + i);
    if (e->ptr == key) {
      found = true;
      *nframes = e->nframes;
      memcpy(frames, e->frames, e->nframes * sizeof *frames);
    }
  }
  ur_tid_unlock(&ur_debug.ft_lock);
  return found;
}

static void log_free_error(uintptr_t p, size_t len, const uint64_t *frames, size_t nframes) {
  const uint8_t *mem = (const uint8_t *)p;
  ur_dlog(LOG_DIVIDER);
  ur_dlog("+++ ALLOCATION %p USED AFTER FREE", (void *)p);
  for (size_t i = 0; i < len; i++)
    if (mem[i] != FILL_FREE_VALUE)
      ur_dlog("  allocation[%zu] = 0x%02x (expected 0x%02x)", i, mem[i], FILL_FREE_VALUE);
  if (nframes) {
    ur_dlog("Backtrace at time of free:");
    ur_log_frames(frames, nframes);
  }
  ur_dlog(LOG_DIVIDER);
  ur_maybe_abort();
}

/* PointerData::VerifyFreedPointer. Returns false if the block must not be
 * given back to glibc (its header is damaged, so its glibc pointer is too). */
bool ur_ft_verify(uintptr_t p, const uint64_t *frames, size_t nframes) {
  size_t usable;
  if (ur_debug.header) {
    struct ur_hdr *h = ur_hdr_of((void *)p);
    if (h->tag != DEBUG_FREE_TAG) {
      ur_dlog(LOG_DIVIDER);
      ur_dlog("+++ ALLOCATION 0x%" PRIxPTR " HAS CORRUPTED HEADER TAG 0x%x AFTER FREE", p, h->tag);
      ur_dlog(LOG_DIVIDER);
      ur_maybe_abort();
      return false;
    }
    usable = h->usable;
  } else {
    usable = ur_real_usable_size((void *)p);
  }
  size_t bytes = usable < ur_debug.fill_free ? usable : ur_debug.fill_free;
  if (!ur_all_bytes((const uint8_t *)p, bytes, FILL_FREE_VALUE))
    log_free_error(p, bytes, frames, nframes);
  return true;
}

/* Hold p back: 0. If the FIFO was full, 1 and the oldest block in evicted
 * (verified by the caller, then really freed). -1: not held, because this
 * is a signal handler's free that interrupted its own thread inside the
 * FIFO; the caller frees p at once. */
int ur_ft_push(void *p, const uint64_t *frames, size_t nframes, struct ur_ft_entry *evicted) {
  int out = 0;
  if (!ur_tid_lock(&ur_debug.ft_lock, ur_self_tid())) return -1;
  if (ur_debug.ft_count == ur_debug.ft_cap) {
    struct ur_ft_entry *old = ft_at(ur_debug.ft_head);
    memcpy(evicted, old, ur_debug.ft_stride);
    ur_debug.ft_head = (ur_debug.ft_head + 1) % ur_debug.ft_cap;
    ur_debug.ft_count--;
    out = 1;
  }
  struct ur_ft_entry *e = ft_at(ur_debug.ft_head + ur_debug.ft_count);
  e->ptr = UR_MANGLE(p);
  e->nframes = nframes;
  memcpy(e->frames, frames, nframes * sizeof *frames);
  ur_debug.ft_count++;
  ur_tid_unlock(&ur_debug.ft_lock);
  return out;
}


/* ---- bad pointers -------------------------------------------------------- */

/* malloc_debug.cpp LogError. */
static void log_pointer_error(const void *p, const char *what) {
  ur_dlog(LOG_DIVIDER);
  ur_dlog("+++ ALLOCATION %p %s", p, what);
  if (ur_debug.ft_cap) {
    uint64_t frames[UR_MAX_FRAMES];
    size_t n = 0;
    if (ft_find(p, frames, &n) && n) {
      ur_dlog("Backtrace of original free:");
      ur_log_frames(frames, n);
    }
  }
  ur_dlog("Backtrace at time of failure:");
  ur_log_backtrace_here();
  ur_dlog(LOG_DIVIDER);
  ur_maybe_abort();
}

/* p is not in the registry. Returns true if it was reported (the call then
 * does nothing); false for a block that never went through the debug path
 * (allocated while the shim itself was working), which glibc handles. */
bool ur_bad_pointer(const void *p, const char *fn) {
  char what[64];
  uint64_t frames[1];
  size_t n;
  if (ur_debug.ft_cap && ft_find(p, frames, &n)) {
    snprintf(what, sizeof what, "USED AFTER FREE (%s)", fn);
    log_pointer_error(p, what);
    return true;
  }
  if (ur_debug.o.verify_pointers) {
    snprintf(what, sizeof what, "UNKNOWN POINTER (%s)", fn);
    log_pointer_error(p, what);
    return true;
  }
  return false;
}

/* A registered block whose header tag is wrong (underflow, or garbage). */
bool ur_bad_tag(void *p, const char *fn) {
  if (!ur_debug.header) return false;
  uint32_t tag = ur_hdr_of(p)->tag;
  if (tag == DEBUG_TAG) return false;
  char what[80];
  if (tag == DEBUG_FREE_TAG)
    snprintf(what, sizeof what, "USED AFTER FREE (%s)", fn);
  else
    snprintf(what, sizeof what, "HAS INVALID TAG %" PRIx32 " (%s)", tag, fn);
  log_pointer_error(p, what);
  return true;
}


void ur_verify_all_freed(void) {
  if (!ur_tid_lock(&ur_debug.ft_lock, ur_self_tid())) return;
  for (size_t i = 0; i < ur_debug.ft_count; i++) {
    struct ur_ft_entry *e = ft_at(ur_debug.ft_head + i);
    ur_ft_verify(UR_UNMANGLE(e->ptr), e->frames, e->nframes);
  }
  ur_tid_unlock(&ur_debug.ft_lock);
}
