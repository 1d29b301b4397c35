/*
 * malloc_debug's options on glibc (seed 001, bionic's libc/malloc_debug):
 * guards, fill, expand_alloc, free_track, verify_pointers, leak_track,
 * record_allocs, heap dumps, allocator stats, check_unreachable_on_signal,
 * abort_on_error, with bionic's messages on stderr as "malloc_debug: ...".
 *
 * What the scanner sees is unchanged by any of them: the registry keeps the
 * USER pointer with the REQUESTED size; a header (guards only) lies before the
 * user pointer and stores the glibc pointer mangled; blocks free_track holds
 * back are not registered, and its FIFO keeps their pointers mangled in shim
 * memory; record_allocs' entries keep pointers mangled too.
 */
#ifndef UR_DEBUG_H
#define UR_DEBUG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state.h"

/* Whether the debug path applies (initialising first if needed). */
int ur_dbg_ready_slow(void);
static inline int ur_dbg_ready(void) {
  uint32_t d = ur_load32(&ur_g.debug);
  if (UR_LIKELY(!(d & UR_DBG_UNINIT))) return d != 0;
  return ur_dbg_ready_slow();
}

void *ur_dbg_malloc(size_t n);
void ur_dbg_free(void *p);
void *ur_dbg_calloc(size_t n, size_t m);
void *ur_dbg_realloc(void *p, size_t n);
void *ur_dbg_memalign(size_t align, size_t n);
size_t ur_dbg_usable_size(void *p);

#endif
