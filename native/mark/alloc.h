/*
 * Memory for the mark core, straight from mmap: the same code runs in the
 * scanner and inside the forked snapshot child (native/shim/child.c), where
 * malloc must not be called (a thread stopped at clone time may have held
 * glibc's or the shim's locks). Large arrays are huge-page advised: the mark
 * is a random walk over them and, with 4 KiB pages, nearly every access is a
 * TLB miss that costs several memory references under virtualisation.
 */
#ifndef UR_MARK_ALLOC_H
#define UR_MARK_ALLOC_H

#include <stddef.h>

/* Zeroed n * size bytes (NULL on overflow or failure). */
void *ur_big_calloc(size_t n, size_t size);
/* Grow or shrink, keeping the contents (mremap); NULL on failure, p intact. */
void *ur_big_realloc(void *p, size_t bytes);
void ur_big_free(void *p);

/* Reserve address space for len bytes (MAP_NORESERVE), huge-page advised;
 * pages appear on first touch. NULL on failure. */
void *ur_big_reserve(size_t len);
/* The same in small pages whatever the system's huge-page setting, for
 * memory another process fills a few KiB at a time through /proc/PID/mem
 * (the snapshot child's inbox): a huge page there made the scanner's first
 * write of each request fault in and zero 2 MiB. Released as the others. */
void *ur_small_reserve(size_t len);
void ur_big_release(void *p, size_t len);

#endif
