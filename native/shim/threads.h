/*
 * Per-thread slots (abi.h ur_thread_slot): where each thread announces the
 * allocator operation it is inside, so a scanner that stops it anywhere can
 * treat the blocks in flight as roots.
 */
#ifndef UR_THREADS_H
#define UR_THREADS_H

#include "shim.h"

int ur_threads_init(void);

/* Give the calling thread its slot (ur_tls.slot is never NULL afterwards). */
void ur_thread_attach(void);

/* fork child: only the calling thread survives. */
void ur_threads_after_fork_child(uint32_t new_tid);

/* Wait until no thread but the caller is inside an entry point. */
void ur_threads_wait_quiescent(void);

/* Announce an operation: inputs and outputs first, op last, so a stopped
 * thread's slot never names an op without its pointers. */
static inline void ur_announce(struct ur_thread_slot *s, uint32_t op, const void *in,
                               size_t in_size) {
  s->in_ptr = in ? UR_MANGLE(in) : 0;
  s->in_size = in_size;
  s->out_ptr = 0;
  s->out_size = 0;
  __atomic_store_n(&s->op, op, __ATOMIC_RELEASE);
}

/* glibc has returned: name the new block before it enters the registry. */
static inline void ur_announce_out(struct ur_thread_slot *s, const void *out, size_t size) {
  s->out_size = size;
  __atomic_store_n(&s->out_ptr, out ? UR_MANGLE(out) : 0, __ATOMIC_RELEASE);
}

static inline void ur_leave(struct ur_thread_slot *s) {
  __atomic_store_n(&s->op, UR_OP_NONE, __ATOMIC_RELEASE);
}

#endif
