/*
 * The debug path's blocks (debug_guard.c): the header before the user
 * pointer (guards only), front and rear guards, fill on allocation.
 */
#ifndef UR_DEBUG_GUARD_H
#define UR_DEBUG_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "debug_config.h"
#include "state.h"
#include "syms.h"

#define DEBUG_TAG 0x1ee7d00du
#define DEBUG_FREE_TAG 0x1cc7dccdu
#define FRONT_GUARD_VALUE 0xaa
#define REAR_GUARD_VALUE 0xbb
#define FILL_ALLOC_VALUE 0xeb
#define FILL_FREE_VALUE 0xef

/* Only with front_guard/rear_guard (bionic's HEADER_OPTIONS). Lies just
 * before the front guard, which lies just before the user pointer, so it is
 * outside the block the registry names; the glibc pointer is kept mangled. */
struct ur_hdr {
  uint32_t tag;        /* DEBUG_TAG, DEBUG_FREE_TAG once freed */
  uint32_t reserved;
  uint64_t orig;       /* UR_MANGLE(pointer glibc returned) */
  uint64_t size;       /* requested size */
  uint64_t usable;     /* usable bytes from the user pointer (== size with a rear guard) */
};
_Static_assert(sizeof(struct ur_hdr) == 32, "header keeps the user pointer 16-aligned");

static inline struct ur_hdr *ur_hdr_of(const void *p) {
  return (struct ur_hdr *)((uintptr_t)p - ur_debug.offset);
}

static inline size_t ur_usable_of(void *p) {
  return ur_debug.header ? ur_hdr_of(p)->usable : ur_real_usable_size(p);
}

static inline void *ur_orig_of(void *p) {
  return ur_debug.header ? (void *)UR_UNMANGLE(ur_hdr_of(p)->orig) : p;
}

/* A block for n user bytes, neither registered nor filled yet. align: 0 for
 * malloc's alignment, else a memalign alignment. */
void *ur_alloc_block(size_t n, size_t align, bool zero);

/* fill_on_alloc. */
void ur_fill_alloc(void *p);

/* Whether n bytes at p all hold v. */
bool ur_all_bytes(const uint8_t *p, size_t n, uint8_t v);

/* Report (and maybe abort on) a damaged front or rear guard. */
void ur_check_guards(void *p, struct ur_hdr *h, uint32_t stack_id);

#endif
