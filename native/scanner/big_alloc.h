/*
 * Zeroed allocations for the walker's large arrays, backed by transparent
 * huge pages where the system allows (THP "madvise" mode is common). The
 * mark phase is a random walk over these arrays and the chunk cache; with 4
 * KiB pages nearly every access is a TLB miss, which costs several memory
 * references under virtualisation.
 */
#ifndef UR_SCANNER_BIG_ALLOC_H
#define UR_SCANNER_BIG_ALLOC_H

#include <stddef.h>

void *ur_big_calloc(size_t n, size_t size);
void ur_big_free(void *p);

/* Reserve address space for len bytes (MAP_NORESERVE), huge-page advised;
 * pages appear on first touch. NULL on failure. */
void *ur_big_reserve(size_t len);
void ur_big_release(void *p, size_t len);

#endif
