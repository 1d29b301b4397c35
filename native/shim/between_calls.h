/*
 * Waiting out the allocator calls other threads are inside: malloc_disable,
 * leaving single-thread mode, glibc learning of the helper, the give-back's
 * gate. A thread's slot names its call while it is inside one, but a busy
 * thread's calls follow one another with no moment another core can see
 * its slot empty: the store that leaves a call and the one that announces
 * the next reach memory together. So a waiter also raises
 * UR_SLOW_BETWEEN_CALLS, which sends every thread's next call down the slow
 * path, and there the thread notes that it is between two calls.
 */
#ifndef UR_BETWEEN_CALLS_H
#define UR_BETWEEN_CALLS_H

#include <stdint.h>

#include "state.h"

/* A waiter starts after the change the calls in progress may have missed
 * (and the barrier that publishes it); returns its generation. */
uint32_t ur_calls_wait_begin(void);

/* Whether s's thread has been seen between two calls since the wait of
 * generation gen began: out of the call it was inside then. A waiter
 * waits while ur_slot_in_call(s) and not this. */
int ur_calls_seen_between(const struct ur_thread_slot *s, uint32_t gen);

void ur_calls_wait_end(void);

/* The slow path, with no call announced in the thread's own slot. */
void ur_calls_note_between(void);

/* fork child: no waiter survives. */
void ur_calls_after_fork_child(void);

#endif
