/*
 * The entry points' slow start (entry.h): whatever ur_g.slow flags, a
 * nested call from the shim's own work, and the out-of-line backtrace.
 */
#include "entry.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "between_calls.h"
#include "helper.h"
#include "other_malloc.h"
#include "shim.h"
#include "state.h"
#include "threads.h"

/* A call made while the thread does the shim's own work (ur_tls.busy):
 * glibc allocating for pthread_create or pthread_getattr_np, a signal
 * handler interrupting the shim; or while its slot announces an operation
 * (threads.h ur_slot_op): a signal handler's call landing inside malloc,
 * free or realloc, whose announcement must outlive the handler. It is
 * registered like any other call, or
 * the registry would disagree with glibc once the block changed hands, but
 * it is announced in the thread's spare slot (its real slot may name the
 * operation this one is nested in), starts no helper, attaches no slot and
 * takes no backtrace. Only before the registry exists does it go straight
 * to glibc. */
static int nested_begin(struct ur_thread_slot **out) {
  ur_other_malloc_note();
  for (;;) {
    uint32_t f = ur_load32(&ur_g.slow);
    if (f & (UR_SLOW_UNINIT | UR_SLOW_INERT)) return UR_PASS_THROUGH;
    if (!ur_tls.slot && (pid_t)ur_self_tid() == getpid()) {
      /* The main thread before its first own call (the constructor starting
       * the helper): attaching it calls nothing that allocates, and keeps a
       * single-threaded program in single-thread mode. */
      ur_thread_attach();
      continue;
    }
    /* Not attached (the helper thread, a thread attaching): never the
     * single thread, which updates the registry without locks. */
    if ((f & UR_SLOW_SINGLE) && !ur_tls.slot) {
      ur_go_multi();
      continue;
    }
    if ((f & UR_SLOW_GATE) && ur_load32(&ur_fork->excl_tid) != ur_self_tid()) {
      int saved = errno;
      syscall(SYS_futex, &ur_g.slow, FUTEX_WAIT_PRIVATE, f, NULL, NULL, 0);
      errno = saved;
      continue;
    }
    (void)ur_self_tid(); /* the registry's locks are taken with it (lock.h) */
    *out = &ur_tls.dummy;
    return UR_PROCEED;
  }
}

/* Deal with whatever ur_g.slow flags. */
__attribute__((noinline)) int ur_slow_begin(struct ur_thread_slot **out, uint32_t op,
                                            const void *in, size_t in_size) {
  for (;;) {
    if (ur_tls.busy || (ur_tls.slot && ur_slot_op(ur_tls.slot))) return nested_begin(out);
    uint32_t f = ur_load32(&ur_g.slow);
    if (f & UR_SLOW_UNINIT) {
      ur_init();
      f = ur_load32(&ur_g.slow);
      if (f & UR_SLOW_UNINIT) return UR_PASS_THROUGH; /* our own init is allocating */
    }
    if (f & UR_SLOW_INERT) return UR_PASS_THROUGH;
    if (!ur_tls.slot) ur_thread_attach();
    if (f & UR_SLOW_BETWEEN_CALLS) ur_calls_note_between();
    if (f & UR_SLOW_HELPER) {
      /* Forked child: whoever clears the flag starts the replacement helper;
       * its own allocations find the flag clear and cannot recurse. */
      if (__atomic_fetch_and(&ur_g.slow, ~UR_SLOW_HELPER, __ATOMIC_ACQ_REL) & UR_SLOW_HELPER) {
        ur_tls.busy++;
        ur_helper_start();
        ur_tls.busy--;
      }
      continue;
    }
    struct ur_thread_slot *s = ur_tls.slot;
    ur_announce(s, op, in, in_size);
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* paired with membarrier in malloc_disable */
    f = ur_load32(&ur_g.slow);
    if (!(f & UR_SLOW_GATE) || ur_load32(&ur_fork->excl_tid) == ur_tls.tid) {
      if (f & ~(UR_SLOW_GATE | UR_SLOW_BETWEEN_CALLS | UR_SLOW_NOT_A_REASON)) {
        ur_leave(s);
        continue;
      }
      *out = s;
      return UR_PROCEED;
    }
    /* malloc_disable() is in force: step out of the slot and sleep on the gate. */
    ur_leave(s);
    int saved = errno;
    syscall(SYS_futex, &ur_g.slow, FUTEX_WAIT_PRIVATE, f, NULL, NULL, 0);
    errno = saved;
  }
}

__attribute__((noinline)) uint32_t ur_capture(size_t size) { return ur_capture_here(size); }
