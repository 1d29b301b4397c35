/*
 * The program's malloc found in another object before the shim's: a
 * wrapper that forwards to the shim, or an allocator the shim never hears
 * from (other_malloc.c).
 */
#ifndef UR_OTHER_MALLOC_H
#define UR_OTHER_MALLOC_H

#include <stdint.h>

#include "state.h"

/* >0 while this thread probes the other object's malloc; counts the calls
 * that reached the shim (entry.c nested_begin). */
extern __thread uint32_t ur_probe_calls __attribute__((tls_model("initial-exec")));

static inline void ur_other_malloc_note(void) {
  if (UR_UNLIKELY(ur_probe_calls)) ur_probe_calls++;
}

/* At start (ur_init): the object whose malloc the program's calls reach
 * when it is not the shim's (its path or "the executable"), else NULL. */
const char *ur_other_malloc_find(void);

/* The constructor's check, once the shim is set up and the program not yet
 * running: whether that object's malloc and free reach the shim's. */
int ur_other_malloc_forwards(void);

#endif
