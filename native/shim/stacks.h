/*
 * Deduplicated backtraces (abi.h ur_stack_table). Lookup of a known stack is
 * lock-free; only inserting a new one takes the table lock. Ids are published
 * by a release store of count after their frames are written.
 */
#ifndef UR_STACKS_H
#define UR_STACKS_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

/* max_frames 0: no backtraces; the table exists but stays empty. */
int ur_stacks_init(uint32_t capacity, uint32_t max_frames);

/* Return the id of this stack (1..capacity-1), or 0 if nframes is 0, the
 * table is full or cannot grow, or this is a signal handler's call inside
 * this thread's own insertion (then ur_stack_table.overflowed counts the
 * loss). The table grows a segment at a time (abi.h) from the region. */
uint32_t ur_stacks_intern(const uintptr_t *frames, uint32_t nframes);

/* Copy the frames of an id; returns how many were copied. */
size_t ur_stacks_get(uint32_t id, uintptr_t *out, size_t max);

/* The frames of a published id, without copying (NULL and 0 for none). */
const uint64_t *ur_stacks_frames(uint32_t id, size_t *n);

/* From now on no segment is added: stacks past the table's present room
 * are counted as lost. Called as the program installs a seccomp filter of
 * its own: the region's mmap and mprotect are calls such an allowlist may
 * kill on (vsftpd's grants mmap only read/write, mprotect only read), where
 * a stack not recorded is the lesser loss. */
void ur_stacks_stop_growing(void);

void ur_stacks_lock(uint32_t tid);
void ur_stacks_unlock(void);
void ur_stacks_reset_lock(uint32_t owner_tid);

#endif
