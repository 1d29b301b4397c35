/*
 * The registry updates a signal handler's calls put aside while their
 * thread was inside the shard (registry.c defer), per thread, in the order
 * they were made. The first UR_DEFER_INLINE live in the thread's TLS; past
 * them (a handler that frees or allocates many blocks at once) in memory of
 * the list's own, mapped as it grows and given back once the list is empty.
 * Every change and every read of that memory is made with signals blocked,
 * so a nested handler's call never finds the list halfway changed, or its
 * memory gone.
 */
#ifndef UR_DEFERRED_OPS_H
#define UR_DEFERRED_OPS_H

#include <stdint.h>

#define UR_DEFER_INLINE 32
#define UR_DEFER_REMOVE UINT64_MAX /* meta of a removal */

struct ur_deferred_op {
  uint64_t key, meta;
};
struct ur_deferred_ops {
  uint32_t n;
  uint32_t cap;                /* of more; 0 while the list is inline */
  struct ur_deferred_op *more; /* mmap'ed, cap entries; NULL while inline */
  struct ur_deferred_op op[UR_DEFER_INLINE];
};
extern __thread struct ur_deferred_ops ur_deferred __attribute__((tls_model("initial-exec")));

/* Appends an update. 0, or -1 when no memory was left for a longer list
 * (the update is then not kept). */
int ur_deferred_add(uint64_t key, uint64_t meta);

/* Takes off the first update whose key `wanted` accepts: 1 and the update,
 * or 0 when there is none. */
int ur_deferred_take(int (*wanted)(uint64_t key, void *arg), void *arg, uint64_t *key,
                     uint64_t *meta);

/* The key of update i: 1, or 0 past the end. */
int ur_deferred_key(uint32_t i, uint64_t *key);

#endif
