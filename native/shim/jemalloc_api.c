/*
 * jemalloc's non-standard API (mallocx, rallocx, xallocx, sallocx, dallocx,
 * sdallocx, nallocx) over the shim. A program linked with jemalloc
 * (redis-server, for one) resolves malloc and free to the shim, which the
 * preload puts first, and these to jemalloc: without them here, a block
 * glibc handed out would reach jemalloc's dallocx or sdallocx and crash it.
 * With them every block takes one allocator and is registered. jemalloc's
 * statistics (mallctl, malloc_stats_print) stay jemalloc's: they only
 * describe its own, now idle, arenas.
 */
#include <stdlib.h>
#include <string.h>

#include <malloc.h>

#include "state.h"

/* The flag bits of jemalloc's mallocx(3) that change what comes back;
 * MALLOCX_TCACHE and MALLOCX_ARENA only pick jemalloc's caches. */
#define MALLOCX_LG_ALIGN_MASK 0x3f
#define MALLOCX_ZERO 0x40

static size_t flag_alignment(int flags) {
  unsigned lg = (unsigned)flags & MALLOCX_LG_ALIGN_MASK;
  return lg ? (size_t)1 << lg : 0;
}

UR_EXPORT void *mallocx(size_t size, int flags) {
  size_t align = flag_alignment(flags);
  if (align > 16) {
    void *p = memalign(align, size);
    if (p && (flags & MALLOCX_ZERO)) memset(p, 0, size);
    return p;
  }
  return (flags & MALLOCX_ZERO) ? calloc(1, size) : malloc(size);
}

UR_EXPORT void *rallocx(void *p, size_t size, int flags) {
  size_t align = flag_alignment(flags);
  /* What jemalloc zeroes is what lay beyond the old block's usable size. */
  size_t old = (flags & MALLOCX_ZERO) || align > 16 ? malloc_usable_size(p) : 0;
  void *q;
  if (align > 16) { /* glibc's realloc keeps only its own 16-byte alignment */
    q = memalign(align, size);
    if (!q) return NULL; /* p stays valid, as with realloc */
    memcpy(q, p, old < size ? old : size);
    free(p);
  } else {
    q = realloc(p, size);
    if (!q) return NULL;
  }
  if ((flags & MALLOCX_ZERO) && size > old) memset((char *)q + old, 0, size - old);
  return q;
}

/* Resizing in place is never done: the size the block has, as when jemalloc
 * cannot grow it. */
UR_EXPORT size_t xallocx(void *p, size_t size, size_t extra, int flags) {
  (void)size;
  (void)extra;
  (void)flags;
  return malloc_usable_size(p);
}

UR_EXPORT size_t sallocx(const void *p, int flags) {
  (void)flags;
  return malloc_usable_size((void *)p);
}

UR_EXPORT void dallocx(void *p, int flags) {
  (void)flags;
  free(p);
}

UR_EXPORT void sdallocx(void *p, size_t size, int flags) {
  (void)size;
  (void)flags;
  free(p);
}

/* The size mallocx(size, flags) is sure to give: the size asked for. glibc
 * usually gives more, but not a size this can name in advance (a block may
 * be mmap'ed), and a program may use every byte nallocx promises. */
UR_EXPORT size_t nallocx(size_t size, int flags) {
  (void)flags;
  return size ? size : 1;
}
