/*
 * free_track and the bad-pointer reports (debug_pointers.c).
 */
#ifndef UR_DEBUG_POINTERS_H
#define UR_DEBUG_POINTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* free_track FIFO entry (in the region): mangled pointer, free backtrace. */
struct ur_ft_entry {
  uint64_t ptr;
  uint64_t nframes;
  uint64_t frames[];
};

/* PointerData::VerifyFreedPointer. Returns false if the block must not be
 * given back to glibc (its header is damaged, so its glibc pointer is too). */
bool ur_ft_verify(uintptr_t p, const uint64_t *frames, size_t nframes);

/* Hold p back: 0. If the FIFO was full, 1 and the oldest block in evicted
 * (verified by the caller, then really freed). -1: not held (a signal
 * handler's free inside its own thread's FIFO); the caller frees p. */
int ur_ft_push(void *p, const uint64_t *frames, size_t nframes, struct ur_ft_entry *evicted);

/* Every block still held back, checked (at exit). */
void ur_verify_all_freed(void);

/* p is not in the registry. Returns true if it was reported (the call then
 * does nothing); false for a block that never went through the debug path. */
bool ur_bad_pointer(const void *p, const char *fn);

/* A registered block whose header tag is wrong (underflow, or garbage). */
bool ur_bad_tag(void *p, const char *fn);

#endif
