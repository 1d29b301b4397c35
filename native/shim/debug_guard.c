/*
 * Blocks with a header, guards and fill (bionic's GuardData and the header
 * of DebugData): how a block is laid out and allocated on the debug path,
 * and the check of its guards.
 */
#include "debug_guard.h"

#include <errno.h>
#include <string.h>

#include "debug_config.h"
#include "debug_log.h"
#include "state.h"
#include "syms.h"

/* A block for n user bytes, neither registered nor filled yet. align: 0 for
 * malloc's alignment, else a memalign alignment. */
void *ur_alloc_block(size_t n, size_t align, bool zero) {
  size_t real;
  if (ur_debug.header) {
    size_t a = 16;
    if (align > SIZE_MAX / 2 + 1) { /* as glibc's memalign */
      errno = EINVAL;
      return NULL;
    }
    if (align > 16) {
      a = align;
      if (a & (a - 1)) a = (size_t)1 << (64 - __builtin_clzll(a)); /* next power of two */
    }
    if (__builtin_add_overflow(n, ur_debug.extra, &real) ||
        __builtin_add_overflow(real, a > 16 ? a : 0, &real)) {
      errno = ENOMEM;
      return NULL;
    }
    void *orig = ur_libc.malloc(real); /* 16-aligned, like bionic's memalign(16) */
    if (!orig) return NULL;
    uintptr_t u = ((uintptr_t)orig + ur_debug.offset + a - 1) & ~(uintptr_t)(a - 1);
    struct ur_hdr *h = ur_hdr_of((void *)u);
    size_t usable = ur_real_usable_size(orig);
    if (usable < real) usable = real;
    h->tag = DEBUG_TAG;
    h->reserved = 0;
    h->orig = UR_MANGLE(orig);
    h->size = n;
    h->usable = usable - (u - (uintptr_t)orig);
    if (zero) memset((void *)u, 0, h->usable);
    if (ur_debug.front) memset((uint8_t *)h + sizeof *h, FRONT_GUARD_VALUE, ur_debug.front);
    if (ur_debug.rear) {
      memset((uint8_t *)u + n, REAR_GUARD_VALUE, ur_debug.rear);
      h->usable = n;
    }
    return (void *)u;
  }
  if (__builtin_add_overflow(n, ur_debug.expand, &real)) {
    errno = ENOMEM;
    return NULL;
  }
  if (align) return ur_libc.memalign(align, real);
  return zero ? ur_libc.calloc(1, real) : ur_libc.malloc(real);
}

void ur_fill_alloc(void *p) {
  if (!ur_debug.fill_alloc || !p) return;
  size_t n = ur_usable_of(p);
  memset(p, FILL_ALLOC_VALUE, n < ur_debug.fill_alloc ? n : ur_debug.fill_alloc);
}

static void guard_failure(void *p, struct ur_hdr *h, const uint8_t *data, size_t len,
                          uint8_t expected, const char *which, uint32_t stack_id) {
  ur_dlog(LOG_DIVIDER);
  ur_dlog("+++ ALLOCATION %p SIZE %zu HAS A CORRUPTED %s GUARD", p, (size_t)h->size, which);
  long idx = (long)((intptr_t)data - (intptr_t)p);
  for (size_t i = 0; i < len; i++)
    if (data[i] != expected)
      ur_dlog("  allocation[%ld] = 0x%02x (expected 0x%02x)", idx + (long)i, data[i], expected);
  ur_dlog("Backtrace at time of failure:");
  ur_log_backtrace_here();
  if (stack_id) {
    ur_dlog("Backtrace at time of allocation:");
    ur_log_stack_id(stack_id);
  }
  ur_dlog(LOG_DIVIDER);
  ur_maybe_abort();
}

bool ur_all_bytes(const uint8_t *p, size_t n, uint8_t v) {
  uint64_t w = UINT64_C(0x0101010101010101) * v;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    memcpy(&x, p + i, 8);
    if (x != w) return false;
  }
  for (; i < n; i++)
    if (p[i] != v) return false;
  return true;
}

void ur_check_guards(void *p, struct ur_hdr *h, uint32_t stack_id) {
  if (ur_debug.front) {
    const uint8_t *g = (const uint8_t *)h + sizeof *h;
    if (!ur_all_bytes(g, ur_debug.front, FRONT_GUARD_VALUE))
      guard_failure(p, h, g, ur_debug.front, FRONT_GUARD_VALUE, "FRONT", stack_id);
  }
  if (ur_debug.rear) {
    const uint8_t *g = (const uint8_t *)p + h->size;
    if (!ur_all_bytes(g, ur_debug.rear, REAR_GUARD_VALUE))
      guard_failure(p, h, g, ur_debug.rear, REAR_GUARD_VALUE, "REAR", stack_id);
  }
}
