#include "threads.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/membarrier.h>

#include "between_calls.h"
#include "debug_record.h"
#include "lock.h"
#include "region.h"
#include "syms.h"

static struct {
  uint32_t high_water; /* slots [0, high_water) have been handed out at least once */
  pthread_key_t key;
  int key_ok;
  pid_t main_tid;
} th;

/* ---- stack bounds ------------------------------------------------------------
 *
 * A slot keeps its thread's stack bounds, so that once the thread has exited
 * the scanner can tell its stack (cached by glibc, full of stale pointers)
 * from live memory. glibc knows them: pthread_getattr_np. But that holds the
 * thread's own lock while it allocates (its cpuset), and a thread's first
 * allocation attaches it: a thread whose first allocation came from inside
 * pthread_getattr_np (every JVM thread's does) then waited on itself for
 * ever. So the shim defines pthread_getattr_np too, counting the calls in
 * progress, and a thread attached inside one gets its bounds at exit. */

typedef int (*getattr_fn)(pthread_t, pthread_attr_t *);

static getattr_fn real_getattr(void) {
  static getattr_fn real;
  getattr_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
  if (UR_UNLIKELY(!f)) {
    f = (getattr_fn)ur_sym_next("pthread_getattr_np"); /* not dlsym: syms.h */
    __atomic_store_n(&real, f, __ATOMIC_RELEASE);
  }
  return f;
}

UR_EXPORT int pthread_getattr_np(pthread_t thread, pthread_attr_t *attr) {
  ur_tls.in_getattr++;
  getattr_fn f = real_getattr();
  int r = f ? f(thread, attr) : ENOSYS;
  ur_tls.in_getattr--;
  return r;
}

static void record_stack(struct ur_thread_slot *s) {
  getattr_fn f = real_getattr();
  pthread_attr_t attr;
  ur_tls.busy++; /* glibc allocates inside: registered, no slot, no backtrace (nested_begin) */
  if (f && f(pthread_self(), &attr) == 0) {
    void *addr;
    size_t size;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
      s->stack_lo = (uint64_t)(uintptr_t)addr;
      s->stack_hi = (uint64_t)(uintptr_t)addr + size;
    }
    pthread_attr_destroy(&attr);
  }
  ur_tls.busy--;
}

/* Runs at thread exit (pthread key destructor). The stack may be cached and
 * reused by glibc, so its bounds stay; later destructors that free still
 * announce through this slot, so the scanner honours op in any state. */
static void on_thread_exit(void *v) {
  struct ur_thread_slot *s = v;
  /* An operation still announced will never finish: a signal handler that
   * interrupted it ended the thread (pthread_exit, cancellation). Left, it
   * kept malloc_disable waiting for ever and its blocks in flight for
   * every scan. Its calls nested in the handler used the spare slot. */
  if (__atomic_load_n(&s->op, __ATOMIC_RELAXED) != UR_OP_NONE) ur_leave(s);
  if (!s->stack_hi) record_stack(s); /* attached inside pthread_getattr_np */
  ur_debug_thread_done(); /* record_allocs: "TID: thread_done 0x0" */
  /* Once EXITED, the slot may go to a new thread, and with it the shards
   * owned under its token: later destructors here lock like strangers. */
  ur_tls.shard_token = 0;
  __atomic_store_n(&s->state, UR_THREAD_EXITED, __ATOMIC_RELEASE);
}

int ur_threads_init(void) {
  ur_g.threads = ur_region_alloc(UR_MAX_THREADS * sizeof(struct ur_thread_slot));
  if (!ur_g.threads) return -1;
  th.main_tid = getpid();
  th.key_ok = pthread_key_create(&th.key, on_thread_exit) == 0;
  (void)real_getattr(); /* looked up now, not inside a thread's first allocation */
  return 0;
}

static struct ur_thread_slot *claim(uint32_t tid) {
  struct ur_thread_slot *slots = ur_g.threads;
  uint32_t hw = __atomic_load_n(&th.high_water, __ATOMIC_ACQUIRE);
  /* Our TLS can be re-zeroed by the loader's TLS setup after the main
   * thread's first calls; find the slot we already own instead of leaking it. */
  for (uint32_t i = 0; i < hw; i++)
    if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == UR_THREAD_LIVE &&
        __atomic_load_n(&slots[i].tid, __ATOMIC_RELAXED) == tid)
      return &slots[i];
  uint32_t i = __atomic_fetch_add(&th.high_water, 1, __ATOMIC_ACQ_REL);
  if (i < UR_MAX_THREADS) {
    __atomic_store_n(&slots[i].state, UR_THREAD_LIVE, __ATOMIC_RELEASE);
    return &slots[i];
  }
  __atomic_store_n(&th.high_water, UR_MAX_THREADS, __ATOMIC_RELAXED);
  /* Full: recycle a slot whose thread has gone. */
  for (uint32_t j = 0; j < UR_MAX_THREADS; j++) {
    uint32_t st = __atomic_load_n(&slots[j].state, __ATOMIC_ACQUIRE);
    if (st != UR_THREAD_LIVE &&
        __atomic_compare_exchange_n(&slots[j].state, &st, UR_THREAD_LIVE, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
      return &slots[j];
  }
  return NULL;
}

void ur_thread_attach(void) {
  uint32_t tid = ur_self_tid();
  struct ur_thread_slot *s = claim(tid);
  struct ur_thread_slot *none = NULL;
  if (!s || !__atomic_compare_exchange_n(&ur_g.single_slot, &none, s, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
    if (ur_g.single_slot != s) ur_go_multi(); /* a second thread: locks from now on */
  }
  if (!s) {
    /* Untracked announcements beat no tracking; not the spare slot, so
     * that a handler's call nested in this thread's own is told apart. */
    ur_tls.slot = &ur_tls.unshared;
    ur_tls.shard_token = 0;
    return;
  }
  s->op = UR_OP_NONE;
  /* Malloc's and free's inline paths write op alone (threads.h): a recycled
   * slot must name no block, even if its last thread ended inside realloc
   * (cancelled, or exiting from a signal handler). */
  s->in_ptr = s->in_size = s->out_ptr = s->out_size = 0;
  s->reserved0 = 0; /* names no shard: the slot's last thread has left */
  __atomic_store_n(&s->tid, tid, __ATOMIC_RELEASE);
  if ((pid_t)tid != th.main_tid) {
    s->stack_lo = s->stack_hi = 0;
    if (!ur_tls.in_getattr) record_stack(s);
    /* glibc may allocate inside (keys past 31): registered as nested calls. */
    ur_tls.busy++;
    if (th.key_ok) pthread_setspecific(th.key, s);
    ur_tls.busy--;
  } else {
    s->stack_lo = s->stack_hi = 0; /* the scanner uses the [stack] mapping */
  }
  ur_tls.shard_token = (uint32_t)(s - ur_g.threads) + 1;
  ur_tls.slot = s;
}

void ur_threads_after_fork_child(uint32_t new_tid) {
  struct ur_thread_slot *mine = ur_tls.slot;
  uint32_t hw = th.high_water < UR_MAX_THREADS ? th.high_water : UR_MAX_THREADS;
  th.main_tid = getpid();
  for (uint32_t i = 0; i < hw; i++) {
    struct ur_thread_slot *s = &ur_g.threads[i];
    if (s == mine) continue;
    s->reserved0 = 0; /* the thread is gone, and so is what it owned */
    if (s->state != UR_THREAD_LIVE) continue;
    s->op = UR_OP_NONE;
    s->state = UR_THREAD_EXITED; /* their stacks are in glibc's cache now */
  }
  if (mine && mine != &ur_tls.unshared) {
    mine->tid = new_tid;
    /* The forking thread is the child's main thread: its stack is [stack]
     * only if it was the parent's main thread, so keep the bounds we have. */
  }
}

int ur_tid_gone(uint32_t tid) {
  int saved = errno;
  int gone = syscall(SYS_tgkill, getpid(), (pid_t)tid, 0) != 0 && errno == ESRCH;
  errno = saved;
  return gone;
}

/* Whether the slot's thread has ended: then its slot is released. */
static int thread_gone(struct ur_thread_slot *s) {
  uint32_t tid = __atomic_load_n(&s->tid, __ATOMIC_ACQUIRE);
  if (!tid || !ur_tid_gone(tid)) return 0;
  ur_leave(s);
  uint32_t live = UR_THREAD_LIVE;
  __atomic_compare_exchange_n(&s->state, &live, UR_THREAD_EXITED, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_RELAXED);
  return 1;
}

void ur_go_multi(void) {
  if (!(ur_load32(&ur_g.slow) & UR_SLOW_SINGLE)) return;
  struct ur_thread_slot *single = __atomic_load_n(&ur_g.single_slot, __ATOMIC_ACQUIRE);
  if (single && ur_tls.slot == single) return;
  uint32_t tid = ur_self_tid();
  ur_lock_hard(&ur_g.multi_lock, tid);
  if (ur_load32(&ur_g.slow) & UR_SLOW_SINGLE) {
    __atomic_fetch_and(&ur_g.slow, ~UR_SLOW_SINGLE, __ATOMIC_SEQ_CST);
    /* The single thread announces, then reads the flag, with no fence: this
     * barrier makes it either see the flag gone or show us its op, which we
     * then wait out. After that it only touches the registry under locks. */
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (single) {
      uint32_t gen = ur_calls_wait_begin();
      unsigned looks = 0;
      while (ur_slot_in_call(single) && !ur_calls_seen_between(single, gen))
        ur_wait_a_turn(&looks);
      ur_calls_wait_end();
    }
  }
  ur_unlock(&ur_g.multi_lock, 1);
}

int ur_slot_in_call(struct ur_thread_slot *s) {
  return __atomic_load_n(&s->op, __ATOMIC_ACQUIRE) != UR_OP_NONE &&
         __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != UR_THREAD_FREE && !thread_gone(s);
}

void ur_threads_wait_quiescent(void) {
  struct ur_thread_slot *mine = ur_tls.slot;
  uint32_t hw = ur_threads_high_water();
  uint32_t gen = ur_calls_wait_begin();
  for (uint32_t i = 0; i < hw; i++) {
    struct ur_thread_slot *s = &ur_g.threads[i];
    if (s == mine) continue;
    unsigned looks = 0;
    while (ur_slot_in_call(s) && !ur_calls_seen_between(s, gen)) ur_wait_a_turn(&looks);
  }
  ur_calls_wait_end();
}

uint32_t ur_threads_high_water(void) {
  uint32_t hw = __atomic_load_n(&th.high_water, __ATOMIC_ACQUIRE);
  return hw < UR_MAX_THREADS ? hw : UR_MAX_THREADS;
}
