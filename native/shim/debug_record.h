/*
 * record_allocs (debug_record.c). The entry points record through the
 * inline functions below; pointers are kept mangled.
 */
#ifndef UR_DEBUG_RECORD_H
#define UR_DEBUG_RECORD_H

#include <stdint.h>

#include "debug_config.h"
#include "state.h"

/* record_allocs entry (in the region); pointers mangled. */
enum {
  UR_REC_MALLOC = 1,
  UR_REC_FREE,
  UR_REC_CALLOC,
  UR_REC_REALLOC,
  UR_REC_MEMALIGN,
  UR_REC_THREAD_DONE
};
struct ur_rec {
  uint64_t ptr;   /* UR_MANGLE(result or freed pointer) */
  uint64_t arg;   /* calloc: nmemb; memalign: alignment; realloc: UR_MANGLE(old) */
  uint64_t size;
  uint32_t tid;
  uint32_t type;
};

/* Reserve an entry: a free reserves before glibc can hand the block out
 * again, an allocation after glibc returned it, so the file's order is never
 * "malloc P" before the "free P" that made P available. */
static inline int64_t ur_rec_reserve(void) {
  if (!ur_debug.rec) return -1;
  __atomic_fetch_add(&ur_debug.rec_inflight, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&ur_debug.rec_dumping, __ATOMIC_SEQ_CST)) {
    __atomic_fetch_sub(&ur_debug.rec_inflight, 1, __ATOMIC_RELEASE);
    return -1; /* operations during a dump are not recorded */
  }
  uint64_t i = __atomic_fetch_add(&ur_debug.rec_cur, 1, __ATOMIC_RELAXED);
  if (i >= ur_debug.rec_total) {
    __atomic_fetch_sub(&ur_debug.rec_inflight, 1, __ATOMIC_RELEASE);
    return -1; /* full: dropped until the next dump */
  }
  return (int64_t)i;
}

static inline void ur_rec_commit(int64_t i, uint32_t type, uint64_t ptr, uint64_t arg,
                                 uint64_t size) {
  if (i < 0) return;
  struct ur_rec *r = &ur_debug.rec[i];
  r->ptr = ptr;
  r->arg = arg;
  r->size = size;
  r->tid = ur_self_tid();
  r->type = type;
  __atomic_fetch_sub(&ur_debug.rec_inflight, 1, __ATOMIC_RELEASE);
}

/* Calls made during the shim's own work (busy: glibc allocating for
 * pthread_create, say) are not the program's and are not recorded. */
static inline void ur_rec_add(uint32_t type, uint64_t ptr, uint64_t arg, uint64_t size) {
  if (ur_debug.rec && !ur_tls.busy) ur_rec_commit(ur_rec_reserve(), type, ptr, arg, size);
}

/* A thread that used the allocator is exiting (record_allocs thread_done). */
void ur_debug_thread_done(void);

/* Write the records to path and delete them. */
void ur_rec_dump(const char *path);

#endif
