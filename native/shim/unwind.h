/*
 * Allocation-site backtraces through code without frame pointers (Debian's
 * libc and libstdc++), using libunwind's cached DWARF fast path.
 */
#ifndef UR_UNWIND_H
#define UR_UNWIND_H

#include <stddef.h>
#include <stdint.h>

void ur_unwind_init(void);

/* Fill out[0..max) with return addresses, frame 0 being the return address
 * into the code that called the allocator. Never allocates; callers run it
 * with ur_tls.busy set so anything libunwind does goes straight to glibc. */
size_t ur_unwind(uintptr_t *out, size_t max);

#endif
