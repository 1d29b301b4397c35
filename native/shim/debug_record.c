/*
 * record_allocs (bionic's RecordData): every call recorded in an array in
 * the region, written to a file on a signal or at exit.
 */
#include "debug_record.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "debug_config.h"
#include "debug_log.h"
#include "lock.h"
#include "state.h"

void ur_debug_thread_done(void) { ur_rec_add(UR_REC_THREAD_DONE, UR_MANGLE(0), 0, 0); }

void ur_rec_dump(const char *path) {
  uint32_t tid = ur_self_tid();
  ur_lock_hard(&ur_debug.rec_lock, tid);
  __atomic_store_n(&ur_debug.rec_dumping, 1, __ATOMIC_SEQ_CST);
  unsigned looks = 0;
  while (__atomic_load_n(&ur_debug.rec_inflight, __ATOMIC_SEQ_CST)) ur_wait_a_turn(&looks);
  uint64_t n = __atomic_load_n(&ur_debug.rec_cur, __ATOMIC_ACQUIRE);
  if (n > ur_debug.rec_total) n = ur_debug.rec_total;
  const char *why;
  int fd = ur_open_output(path, &why);
  if (fd < 0) {
    ur_dlog("Cannot create record alloc file %s: %s", path, why ? why : strerrordesc_np(errno));
  } else {
    static struct ur_bw w; /* serialised by rec_lock; 8 KiB is too much for some stacks */
    w.fd = fd;
    w.len = 0;
    for (uint64_t i = 0; i < n; i++) {
      const struct ur_rec *r = &ur_debug.rec[i];
      uintptr_t p = UR_UNMANGLE(r->ptr);
      switch (r->type) {
        case UR_REC_MALLOC:
          ur_bw_printf(&w, "%u: malloc 0x%" PRIxPTR " %" PRIu64 "\n", r->tid, p, r->size);
          break;
        case UR_REC_FREE:
          ur_bw_printf(&w, "%u: free 0x%" PRIxPTR "\n", r->tid, p);
          break;
        case UR_REC_CALLOC:
          ur_bw_printf(&w, "%u: calloc 0x%" PRIxPTR " %" PRIu64 " %" PRIu64 "\n", r->tid, p, r->arg,
                       r->size);
          break;
        case UR_REC_REALLOC:
          ur_bw_printf(&w, "%u: realloc 0x%" PRIxPTR " 0x%" PRIxPTR " %" PRIu64 "\n", r->tid, p,
                       UR_UNMANGLE(r->arg), r->size);
          break;
        case UR_REC_MEMALIGN:
          ur_bw_printf(&w, "%u: memalign 0x%" PRIxPTR " %" PRIu64 " %" PRIu64 "\n", r->tid, p,
                       r->arg, r->size);
          break;
        case UR_REC_THREAD_DONE:
          ur_bw_printf(&w, "%u: thread_done 0x0\n", r->tid);
          break;
        default:
          break;
      }
    }
    ur_bw_flush(&w);
    close(fd);
    __atomic_store_n(&ur_debug.rec_cur, 0, __ATOMIC_RELEASE); /* dumped entries are deleted */
  }
  __atomic_store_n(&ur_debug.rec_dumping, 0, __ATOMIC_SEQ_CST);
  ur_unlock(&ur_debug.rec_lock, 1);
}
