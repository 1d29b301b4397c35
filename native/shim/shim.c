/*
 * Start-up and process lifecycle: lazy initialisation on the first
 * allocation (before any constructor runs), filling in the exported
 * descriptor, the constructor that finishes what needs a running libc, the
 * destructor's at-exit work, and fork handling.
 */
#include "shim.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "altstack.h"
#include "between_calls.h"
#include "debug_setup.h"
#include "helper.h"
#include "huge_arenas.h"
#include "lock.h"
#include "modules.h"
#include "options.h"
#include "other_malloc.h"
#include "raw_clone.h"
#include "region.h"
#include "registry.h"
#include "single_thread.h"
#include "stacks.h"
#include "state.h"
#include "syms.h"
#include "threads.h"
#include "unwind.h"

static struct ur_options opts;
static int options_ok;
static const char *other_malloc; /* the object whose malloc the program calls, when not ours */
/* The forker's own: the next forker sets them in its prepare handler while
 * this one may still be in its parent handler. Stored only when they
 * change (set_tls): the page they share with errno and glibc's own
 * thread state is write-protected by every fork, and a store there, even
 * of the same value, costs a fault and a page copy while the child lives. */
static __thread int fork_nested __attribute__((tls_model("initial-exec"))); /* holds malloc_disable */
static __thread int fork_io_locked __attribute__((tls_model("initial-exec"))); /* took stdio's list lock */
static __thread uint32_t fork_token __attribute__((tls_model("initial-exec"))); /* slot + 1 at prepare */
/* A signal handler may fork while its thread is inside these handlers (glibc
 * allows it in a single-threaded process): the inner fork must not wait for
 * locks its own thread is taking, nor undo what the outer one set. Whether
 * the thread is inside is ur_fork->in_fork[its slot] (set and cleared on
 * every fork, so not in TLS), or fork_depth for a thread with no slot. */
static __thread uint8_t fork_depth __attribute__((tls_model("initial-exec")));
static __thread uint32_t fork_reentered __attribute__((tls_model("initial-exec")));
static int membarrier_ok; /* needed for the lock-free single-thread mode */
extern char **__environ;
extern char *program_invocation_name;

/* The environment may not be set up yet when the first allocation arrives
 * (the loader allocates before libc's initialiser runs), so fall back to
 * /proc/self/environ. Returns a region copy of the value ("" if unset). */
static char *read_options(void) {
  const char *name = UR_OPTIONS_ENV "=";
  size_t nlen = strlen(name);
  const char *val = NULL;
  char *buf = NULL;
  if (__environ) {
    for (char **e = __environ; *e; e++)
      if (strncmp(*e, name, nlen) == 0) val = *e + nlen;
  } else {
    int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      size_t cap = 1 << 20, len = 0;
      buf = ur_region_alloc(cap + 1);
      ssize_t n;
      while (buf && len < cap && ((n = read(fd, buf + len, cap - len)) > 0 || (n < 0 && errno == EINTR)))
        if (n > 0) len += (size_t)n;
      close(fd);
      for (size_t i = 0; buf && i < len; i += strlen(buf + i) + 1)
        if (strncmp(buf + i, name, nlen) == 0) val = buf + i + nlen;
    }
  }
  size_t vlen = val ? strlen(val) : 0;
  char *copy = ur_region_alloc(vlen + 1);
  if (copy && vlen) memcpy(copy, val, vlen);
  return copy;
}

/* Nobody holds a lock yet (ur_init's thread runs alone in the registry),
 * so the words move as they are. */
static void use_unshared_fork_words(void) {
  int saved = errno;
  struct ur_fork_words *w = ur_region_alloc_unshared(sizeof *w);
  errno = saved;
  if (!w) return;
  *w = *ur_fork;
  __atomic_store_n(&ur_fork, w, __ATOMIC_RELEASE);
  unreachable_descriptor.shard_locks = (uint64_t)(uintptr_t)w->shard_lock;
}

void ur_init(void) {
  uint32_t tid = ur_self_tid(), expected = 0;
  if (!__atomic_compare_exchange_n(&ur_g.init_tid, &expected, tid, 0, __ATOMIC_ACQUIRE,
                                   __ATOMIC_ACQUIRE)) {
    if (expected == tid) return; /* re-entered from our own set-up: glibc serves it */
    while (ur_load32(&ur_g.slow) & UR_SLOW_UNINIT) sched_yield();
    return;
  }
  if (!(ur_load32(&ur_g.slow) & UR_SLOW_UNINIT)) return;
  ur_tls.busy++;
  ur_syms_init(); /* before the program runs on, and whatever the options say */
  struct ur_descriptor *d = &unreachable_descriptor;
  uint32_t state = 0; /* the value ur_g.slow takes when we are done */
  int debug = 0;      /* ur_debug_configure: malloc_debug's per-call options */
  if (ur_region_init() != 0) {
    d->disabled = UR_DISABLED_NO_MEMORY;
    d->disabled_errno = errno;
    state = UR_SLOW_INERT;
  } else {
    use_unshared_fork_words(); /* before huge pages: its page splits the piece */
    if (ur_huge_arenas_wanted()) ur_region_use_huge_pages();
    ur_g.options = read_options();
    d->region_begin = ur_region_begin();
    d->region_end = ur_region_end();
    d->options = (uint64_t)(uintptr_t)ur_g.options;
    d->pid = (uint64_t)getpid();
    options_ok = ur_g.options && ur_options_parse(ur_g.options, &opts, NULL, NULL, NULL);
    if (!options_ok) {
      d->disabled = ur_g.options ? UR_DISABLED_OPTIONS : UR_DISABLED_NO_MEMORY;
      d->disabled_errno = ur_g.options ? 0 : ur_region_error();
      state = UR_SLOW_INERT;
    } else {
      /* Whether its calls reach the shim is the constructor's to find out
       * (other_malloc.c): until then the shim runs as usual. */
      other_malloc = ur_other_malloc_find();
    }
  }
  if (!state) {
    uint32_t frames = (uint32_t)opts.backtrace_frames;
    ur_g.bt_frames = frames;
    ur_g.bt_min_size = opts.backtrace_min_size;
    ur_g.bt_max_size = opts.backtrace_max_size;
    /* With both options, capture starts on; with the signal option alone, off. */
    ur_g.bt_active = opts.backtrace;
    ur_g.small_in_shards = frames != 0;
    ur_g.helper_cmd = ur_region_alloc(sizeof(uint32_t));
    if (ur_registry_init() || ur_threads_init() || ur_altstacks_init() ||
        ur_stacks_init(frames ? UR_STACK_CAPACITY : 0, frames) || !ur_g.helper_cmd ||
        (debug = ur_debug_configure(&opts)) < 0) {
      d->disabled = UR_DISABLED_NO_MEMORY;
      d->disabled_errno = ur_region_error();
      state = UR_SLOW_INERT;
    }
  }
  if (!state) {
    if (ur_g.bt_frames) ur_unwind_init();
    ur_modules_init();
    /* Lets malloc_disable fence every running thread without the hot path
     * paying for a barrier. */
    membarrier_ok =
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    if (membarrier_ok) state = UR_SLOW_SINGLE; /* not a failure: start lock-free */
    ur_g.bias_ok = (uint32_t)membarrier_ok;
    d->num_shards = UR_NUM_SHARDS;
    d->shards = (uint64_t)(uintptr_t)ur_g.shards;
    d->threads = (uint64_t)(uintptr_t)ur_g.threads;
    d->max_threads = UR_MAX_THREADS;
    d->helper_cmd = (uint64_t)(uintptr_t)ur_g.helper_cmd;
    d->stacks = (uint64_t)(uintptr_t)ur_g.stacks;
    d->size_maps = (uint64_t)(uintptr_t)ur_size_maps_header();
    __atomic_store_n(&d->enabled, 1, __ATOMIC_RELEASE);
  }
  ur_tls.busy--;
  /* Decided before anyone leaves ur_init: the first blocks already carry
   * the debug header if they need one. */
  if (debug > 0) __atomic_store_n(&ur_g.small_in_shards, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&ur_g.debug, !(state & UR_SLOW_INERT) && debug > 0 ? UR_DBG_ON : 0,
                   __ATOMIC_RELEASE);
  if (!(state & UR_SLOW_INERT)) {
    if (debug > 0) state |= UR_SLOW_DEBUG;
    if (ur_g.bt_frames) state |= UR_SLOW_BACKTRACE;
  }
  __atomic_store_n(&ur_g.slow, state, __ATOMIC_RELEASE);
}

/* ---- fork ---------------------------------------------------------------- */

/* stdio's list lock (libc exports these; no header declares them since 2.28). */
extern void _IO_list_lock(void);
extern void _IO_list_unlock(void);
extern void _IO_list_resetlock(void);

static void set_tls(int *word, int value) {
  if (*word != value) *word = value;
}

static void lock_for_fork(uint32_t tid) {
  /* glibc's fork takes stdio's list lock before its malloc locks (glibc bug
   * 19431): a thread may hold a FILE lock while it allocates (getline),
   * and fflush(NULL) holds the list lock while it waits for FILE locks. The
   * registry's locks are malloc locks, so they come after it too. The lock
   * is recursive: glibc's fork takes it again after this handler. Only when
   * glibc sees threads: with one, glibc's fork takes no lock, so that it
   * works from a signal handler, and the code the handler interrupted may
   * hold this one (fclose) with no other thread to wait for. */
  set_tls(&fork_io_locked, !ur_single_glibc_sees_one());
  if (fork_io_locked) _IO_list_lock();
  ur_registry_lock_all(tid);
  ur_stacks_lock(tid);
  __atomic_store_n(&ur_fork->excl_tid, tid, __ATOMIC_RELEASE);
}

/* The forking thread's "inside the fork handlers" flag. */
static uint8_t *fork_depth_of(uint32_t token) {
  return token ? &ur_fork->in_fork[token - 1] : &fork_depth;
}

static void fork_prepare(void) {
  if (ur_load32(&ur_g.slow) & (UR_SLOW_INERT | UR_SLOW_UNINIT)) return;
  uint32_t token = ur_tls.shard_token;
  if (*fork_depth_of(token)) {
    fork_reentered++;
    return;
  }
  *fork_depth_of(token) = 1;
  if (fork_token != token) fork_token = token;
  ur_go_multi(); /* a thread that never allocated may fork */
  uint32_t tid = ur_self_tid();
  set_tls(&fork_nested, ur_load32(&ur_fork->excl_tid) == tid);
  if (!fork_nested) lock_for_fork(tid); /* else malloc_disable already holds everything */
  ur_unwind_gate_close(tid); /* last: threads kept waiting there hold none of the above */
}

static void fork_parent(void) {
  if (ur_load32(&ur_g.slow) & (UR_SLOW_INERT | UR_SLOW_UNINIT)) return;
  if (fork_reentered) {
    fork_reentered--;
    return;
  }
  if (!fork_nested) {
    __atomic_store_n(&ur_fork->excl_tid, 0, __ATOMIC_RELEASE);
    ur_stacks_unlock();
    ur_registry_unlock_all();
    if (fork_io_locked) _IO_list_unlock();
  }
  ur_unwind_gate_open(ur_self_tid());
  /* Only once every lock is given back: a handler's fork meanwhile would
   * wait on the locks its own thread still holds. */
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  *fork_depth_of(fork_token) = 0;
}

/* glibc_forked: 0 in the child of a raw clone (raw_clone.c), which glibc's
 * fork did not make. */
static void after_fork_child(int glibc_forked) {
  if (ur_load32(&ur_g.slow) & (UR_SLOW_INERT | UR_SLOW_UNINIT)) return;
  /* Forked from a handler inside our own prepare: the one thread left holds
   * some of the locks, in no update of what they guard; all are free here. */
  if (fork_reentered) fork_nested = 0;
  fork_reentered = 0;
  /* Set until the locks are reset (the child's copy of ur_fork is zero). */
  *fork_depth_of(fork_token) = 1;
  uint32_t tid = (uint32_t)syscall(SYS_gettid);
  ur_altstacks_after_fork_child(ur_tls.tid, tid);
  ur_tls.tid = tid;
  ur_unwind_gate_after_fork_child();
  /* Still disabled if the disabling thread forked: it keeps every lock. */
  uint32_t owner = fork_nested ? tid : 0;
  /* Held once by fork_prepare, once more by glibc's fork unless it saw a
   * single thread (then it does not reset it either): reset it here. */
  if (!fork_nested && fork_io_locked) _IO_list_resetlock();
  ur_registry_reset_locks(owner);
  ur_stacks_reset_lock(owner);
  ur_region_after_fork_child();
  ur_size_maps_after_fork_child();
  ur_debug_after_fork_child();
  ur_g.multi_lock = 0;
  ur_calls_after_fork_child();
  if (!fork_nested && membarrier_ok && ur_tls.slot && ur_tls.slot != &ur_tls.unshared) {
    ur_g.single_slot = ur_tls.slot; /* only this thread survived */
    __atomic_fetch_or(&ur_g.slow, UR_SLOW_SINGLE, __ATOMIC_SEQ_CST);
  }
  if (fork_nested) {
    ur_g.disable_lock = tid;
  } else {
    /* A gate another thread had closed (the helper giving memory back) has
     * no one left to open it here. */
    ur_g.disable_lock = ur_g.disable_depth = 0;
    __atomic_fetch_and(&ur_g.slow, ~UR_SLOW_GATE, __ATOMIC_SEQ_CST);
  }
  __atomic_store_n(&ur_fork->excl_tid, owner, __ATOMIC_RELEASE);
  ur_threads_after_fork_child(tid);
  unreachable_descriptor.pid = (uint64_t)getpid();
  ur_helper_after_fork_child(glibc_forked);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  *fork_depth_of(fork_token) = 0;
}

static void fork_child(void) { after_fork_child(1); }

static void raw_clone_child(void) { after_fork_child(0); }

/* ---- constructor --------------------------------------------------------- */

static void log_line(void *ctx, const char *msg) {
  (void)ctx;
  char line[600];
  int n = snprintf(line, sizeof line, "unreachable: %s\n", msg);
  if (n > 0) ur_write_stderr(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* Why the shim is off, in the words the scanner uses too
 * (unreachable/capture/descriptor.py: disabled_reason). */
static void log_no_memory(void) {
  char msg[512];
  int err = unreachable_descriptor.disabled_errno;
  /* Inert: strerror may allocate, and glibc serves it. */
  snprintf(msg, sizeof msg,
           "no memory for the registry (%s): the address-space limit (ulimit -v) or "
           "strict overcommit (vm.overcommit_memory=2) leaves the shim no room; disabled",
           err ? strerror(err) : "out of room");
  log_line(NULL, msg);
}

/* The program allocates elsewhere and the shim hears none of it: a
 * registry left empty would report no leak. Before the program runs and
 * before the helper exists, so no scan has started; no block the program
 * holds came through the shim, so none is handed to glibc's free. */
static void go_inert_other_malloc(void) {
  struct ur_descriptor *d = &unreachable_descriptor;
  d->disabled = UR_DISABLED_OTHER_MALLOC;
  __atomic_store_n(&d->enabled, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&ur_g.debug, 0, __ATOMIC_RELEASE);
  __atomic_fetch_or(&ur_g.slow, UR_SLOW_INERT, __ATOMIC_SEQ_CST);
}

__attribute__((constructor)) static void ur_constructor(void) {
  if (ur_load32(&ur_g.slow) & UR_SLOW_UNINIT) ur_init();
  const char *prog = program_invocation_name ? program_invocation_name : "<unknown>";
  char msg[512];
  if (!options_ok) {
    if (ur_g.options) ur_options_parse(ur_g.options, &opts, prog, log_line, NULL);
    else log_no_memory();
    return; /* inert: every call goes straight to glibc */
  }
  if (other_malloc && !(ur_load32(&ur_g.slow) & UR_SLOW_INERT) && !ur_other_malloc_forwards())
    go_inert_other_malloc();
  if (ur_load32(&ur_g.slow) & UR_SLOW_INERT) {
    if (other_malloc) {
      snprintf(msg, sizeof msg,
               "%s: malloc is %s's, found before the shim's (preload the shim first); "
               "disabled",
               prog, other_malloc);
      log_line(NULL, msg);
    } else {
      log_no_memory();
    }
    return;
  }
  for (unsigned i = 0; i < opts.num_unimplemented; i++) {
    snprintf(msg, sizeof msg, "option '%s' is not implemented yet; ignored",
             ur_options_name(opts.unimplemented[i]));
    log_line(NULL, msg);
  }
  if (opts.verbose) {
    snprintf(msg, sizeof msg, "%s: malloc debug enabled", prog);
    log_line(NULL, msg);
  }
  ur_debug_start(prog); /* signal handlers, the verbose "Run:" lines */
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  ur_raw_clone_handlers(fork_prepare, fork_parent, raw_clone_child);
  /* The helper's DTV is registered but the shim's own (helper.c): never a
   * leak to leak_track, nor a block in a heap dump or malloc_iterate. */
  ur_tls.busy++;
  ur_helper_start();
  ur_tls.busy--;
}

/* Process exit: malloc_debug's at-exit work (leak_track, free_track checks,
 * exit dumps). Runs after the program's own destructors and atexit handlers. */
__attribute__((destructor)) static void ur_destructor(void) {
  if (!options_ok || (ur_load32(&ur_g.slow) & (UR_SLOW_INERT | UR_SLOW_UNINIT))) return;
  ur_debug_at_exit();
}
