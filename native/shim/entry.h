/*
 * The entry-point protocol shared by malloc_api.c (the plain path) and
 * debug.c (malloc_debug's options): announce the operation in the thread's
 * slot, or learn that the call must go straight to glibc (entry.c).
 */
#ifndef UR_ENTRY_H
#define UR_ENTRY_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "helper.h"
#include "stacks.h"
#include "state.h"
#include "threads.h"
#include "unwind.h"

enum { UR_PROCEED, UR_PASS_THROUGH };

/* Deal with whatever ur_g.slow flags. Returns UR_PROCEED with the thread's
 * slot announced, or UR_PASS_THROUGH when the call must go straight to glibc. */
int ur_slow_begin(struct ur_thread_slot **out, uint32_t op, const void *in, size_t in_size);

/* Returns the announced slot, or NULL to pass the call straight to glibc. */
static inline __attribute__((always_inline)) struct ur_thread_slot *ur_begin(uint32_t op,
                                                                            const void *in,
                                                                            size_t in_size) {
  struct ur_thread_slot *s = ur_tls.slot;
  if (UR_LIKELY(s != NULL && !(ur_tls.busy | ur_slot_op(s)))) {
    ur_announce(s, op, in, in_size);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (UR_LIKELY((ur_load32(&ur_g.slow) & ~UR_SLOW_NOT_A_REASON) == 0)) return s;
    ur_leave(s);
  }
  return ur_slow_begin(&s, op, in, in_size) == UR_PROCEED ? s : NULL;
}

/* The allocation-site backtrace for a block of this size (0: none). */
static inline __attribute__((always_inline)) uint32_t ur_capture_here(size_t size) {
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

/* The same, out of line. */
uint32_t ur_capture(size_t size);

/* Whether the call announced in s is nested in another on its thread: it
 * was given the spare slot (entry.c nested_begin), not the thread's own. A
 * handler's call takes no backtrace, as the code it interrupted may be
 * inside the unwinder. */
static inline int ur_nested(const struct ur_thread_slot *s) { return s != ur_tls.slot; }

static inline uint32_t ur_maybe_capture(const struct ur_thread_slot *s, size_t size) {
  if (UR_LIKELY(!ur_g.bt_frames) || !__atomic_load_n(&ur_g.bt_active, __ATOMIC_RELAXED) ||
      ur_nested(s))
    return 0;
  return ur_capture(size);
}

/* A block glibc allocated while starting the helper is the shim's (helper.h). */
static inline void ur_note_own(const void *p) {
  if (UR_UNLIKELY(ur_tls.own_alloc)) ur_helper_note_own(p);
}

#endif
