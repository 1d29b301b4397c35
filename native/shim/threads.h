/*
 * Per-thread slots (abi.h ur_thread_slot): where each thread announces the
 * allocator operation it is inside, so a scanner that stops it anywhere can
 * treat the blocks in flight as roots.
 */
#ifndef UR_THREADS_H
#define UR_THREADS_H

#include <emmintrin.h>

#include "state.h"

int ur_threads_init(void);

/* Give the calling thread its slot (ur_tls.slot is never NULL afterwards). */
void ur_thread_attach(void);

/* Leave single-thread mode before the calling thread touches the registry
 * (no-op if already left, or if the caller is the single thread). */
void ur_go_multi(void);

/* fork child: only the calling thread survives. */
void ur_threads_after_fork_child(uint32_t new_tid);

/* Whether the slot's thread is inside an entry point now, for those who
 * wait until it is out (malloc_disable, the give-back's gate): an
 * operation announced in a slot not free, by a thread still there. A
 * thread that ended inside a call without running its destructors (the
 * raw exit system call from a signal handler) left its op set, and nothing
 * else would clear it: its slot is released here as its exit would have
 * left it, op and pairs cleared. */
int ur_slot_in_call(struct ur_thread_slot *s);

/* Whether the thread tid of this process has ended (tgkill's signal 0
 * says ESRCH); errno left as it was. */
int ur_tid_gone(uint32_t tid);

/* Wait until no thread but the caller is inside an entry point (a thread
 * gone meanwhile counts as outside). */
void ur_threads_wait_quiescent(void);

/* Slots [0, this) have been handed out at least once. */
uint32_t ur_threads_high_water(void);

/* Store a (pointer, size) pair of the slot with one 16-byte store: a thread
 * is stopped between instructions, so a reader sees the old pair or the new
 * one, never a mix (and the store buffer takes one entry, not two). */
static inline void ur_slot_pair(uint64_t *pair, uint64_t ptr, uint64_t size) {
  __m128i v = _mm_set_epi64x((long long)size, (long long)ptr);
  _mm_storeu_si128((__m128i *)(void *)pair, v);
}

/* Announce an operation: inputs and outputs first, op last, so a stopped
 * thread's slot never names an op without its pointers. */
static inline void ur_announce(struct ur_thread_slot *s, uint32_t op, const void *in,
                               size_t in_size) {
  ur_slot_pair(&s->in_ptr, in ? UR_MANGLE(in) : 0, in_size);
  ur_slot_pair(&s->out_ptr, 0, 0);
  __atomic_store_n(&s->op, op, __ATOMIC_RELEASE);
}

/* The operation the slot announces already (UR_OP_NONE: none): a call that finds one
 * is nested in it (a signal handler's, landing inside malloc, free or
 * realloc) and takes the slow path's nested start (entry.c), which leaves
 * the slot alone. Announcing and then clearing it there would leave the
 * rest of the interrupted call unannounced, and a scan that stopped the
 * thread in it would read the thread as outside the allocator. A load from
 * the line the announcement stores to next, and a branch: the inline paths
 * keep their one store. */
static inline __attribute__((always_inline)) uint32_t ur_slot_op(const struct ur_thread_slot *s) {
  return __atomic_load_n(&s->op, __ATOMIC_RELAXED);
}

/* Announce an operation that names no block (malloc's and free's inline
 * paths): the op alone. Their block is in the thread's registers or frame
 * at every instruction where the registry holds it, which a scan reads as
 * roots anyway; the pairs are already 0, as ur_leave leaves them. */
static inline void ur_announce_op(struct ur_thread_slot *s, uint32_t op) {
  __atomic_store_n(&s->op, op, __ATOMIC_RELEASE);
}

/* glibc has returned: name the new block before it enters the registry. */
static inline void ur_announce_out(struct ur_thread_slot *s, const void *out, size_t size) {
  __atomic_signal_fence(__ATOMIC_RELEASE); /* after everything before it, as a release store */
  ur_slot_pair(&s->out_ptr, out ? UR_MANGLE(out) : 0, size);
  __atomic_signal_fence(__ATOMIC_SEQ_CST); /* before the registry's stores */
}

/* Leave an operation announced with ur_announce: its pairs cleared before
 * the op (the registry is final by then), so a slot whose op is none names
 * no block, and an announcement by ur_announce_op needs no store but the
 * op's. */
static inline void ur_leave(struct ur_thread_slot *s) {
  ur_slot_pair(&s->in_ptr, 0, 0);
  ur_slot_pair(&s->out_ptr, 0, 0);
  __atomic_store_n(&s->op, UR_OP_NONE, __ATOMIC_RELEASE);
}

/* Leave an operation announced with ur_announce_op. */
static inline void ur_leave_op(struct ur_thread_slot *s) {
  __atomic_store_n(&s->op, UR_OP_NONE, __ATOMIC_RELEASE);
}

#endif
