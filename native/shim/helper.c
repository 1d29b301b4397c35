#include "helper.h"

#include <errno.h>
#include <linux/close_range.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "give_back.h"
#include "huge_arenas.h"
#include "last_thread.h"
#include "raw_syscall.h"
#include "sandbox.h"
#include "self_maps.h"
#include "single_thread.h"
#include "state.h"
#include "write_tracking.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* The child's own descriptor table, empty: it takes no reference to the
 * target's open files. CLOSE_RANGE_UNSHARE over every descriptor copies
 * none of them (Linux 5.9+); where it fails, a copy as fork makes. 0, or -1
 * (then the child must not run on the target's table). */
static int own_empty_table(void) {
  if (syscall(SYS_close_range, 0U, ~0U, CLOSE_RANGE_UNSHARE) == 0) return 0;
  return syscall(SYS_unshare, CLONE_FILES) == 0 ? 0 : -1;
}

/* Returns the child's pid, or 0 if the clone failed. */
static pid_t snapshot(void) {
  /* Raw clone, not fork(): fork runs atfork handlers and takes malloc locks
   * that stopped threads may hold. Exit signal 0, no CLONE_VM: a frozen
   * copy-on-write image. The scanner traces us with PTRACE_O_TRACECLONE, so
   * the child stops before it runs; it then sweeps itself if the scanner
   * asked it to in its copy of the box (child.c), else it just exits.
   * CLONE_FILES: a copy of the table would hold every file the target has
   * open while the child lives, so a socket the target closes meanwhile
   * stays open (its peer sees no end) and stays in the target's epoll sets,
   * reporting its events under a descriptor number the target reuses
   * (haproxy answered 502). Under a seccomp filter the call stays the one
   * the scanner proves the filter allows (clone with no flag, then nothing
   * new in the child). Not through syscall(), whose fork handlers
   * (raw_clone.c) would wait for the locks stopped threads hold. */
  int filtered = __atomic_load_n(&ur_sandbox_filtered, __ATOMIC_RELAXED);
  long pid = ur_sys2(SYS_clone, filtered ? 0UL : (unsigned long)CLONE_FILES, 0);
  if (pid == 0) {
    if (!filtered && own_empty_table() < 0) syscall(SYS_exit_group, 0);
    ur_child_run();
    syscall(SYS_exit_group, 0);
  }
  return pid > 0 ? (pid_t)pid : 0;
}

/* Whether the snapshot child is gone (reaped now, or not ours any more). A
 * traced child is reported to us only once its tracer has reaped it. */
static int child_gone(pid_t child) {
  int saved = errno;
  pid_t r;
  while ((r = wait4(child, NULL, __WALL | WNOHANG, NULL)) < 0 && errno == EINTR) {
  }
  errno = saved;
  return r != 0;
}

/*
 * Two sources of work, two words:
 *   - the command word (abi.h helper_cmd), written by the external scanner
 *     with pwrite while the process is stopped; its protocol is unchanged:
 *     UR_CMD_SNAPSHOT -> clone -> back to UR_CMD_IDLE;
 *   - ur_g.pending, the bits signal handlers set (UR_REQ_*).
 *
 * No request is lost: the helper clears pending (atomic exchange) and runs
 * what it took BEFORE it sleeps, and it sleeps with futex_waitv on BOTH words
 * at their idle values (cmd == IDLE, pending == 0). The kernel compares both
 * values after queueing the waiter, so a handler that sets pending after our
 * exchange either changes the word before the compare (futex_waitv returns
 * EAGAIN at once) or finds us queued and its FUTEX_WAKE on pending wakes us.
 * A scanner's pwrite of the command word is seen the same way: the ptrace
 * stop interrupts the wait, the restarted wait re-reads the word and returns.
 * Kernels without futex_waitv (< 5.16): the helper waits on the command
 * word alone with a 100 ms timeout and the handler also wakes that word, so a
 * request is at worst 100 ms late.
 *
 * While a snapshot child lives (it may sweep for seconds) the command word
 * stays UR_CMD_SNAPSHOT, as the scanner expects, and the helper keeps serving
 * requests: it waits on pending alone, with a short timeout to notice the
 * child's end, instead of blocking in wait4.
 */
#ifndef __NR_futex_waitv
#define __NR_futex_waitv 449
#endif

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleep until there is work, or until `until` (CLOCK_MONOTONIC ns; 0: no limit). */
static void wait_for_work(uint32_t *cmd, uint64_t until, int requests) {
  static int no_waitv;
  int saved = errno;
  if (!no_waitv && !ur_helper_confined()) {
    /* The tracker's word at its present value (idle, on, or a failed
     * start): a scanner's START is seen as the command word's is. Without
     * requests (they wait), the pending word is left out. */
    struct futex_waitv w[3] = {
        {.val = UR_CMD_IDLE, .uaddr = (uintptr_t)cmd, .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG},
        {.val = ur_write_tracking_word(),
         .uaddr = (uintptr_t)&ur_write_tracker.cmd,
         .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG},
        {.val = 0, .uaddr = (uintptr_t)&ur_g.pending, .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG},
    };
    struct timespec abs = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
    unsigned nw = requests ? 3 : 2;
    if (syscall(__NR_futex_waitv, w, nw, 0, until ? &abs : NULL, CLOCK_MONOTONIC) >= 0 ||
        errno != ENOSYS) {
      errno = saved;
      return;
    }
    no_waitv = 1;
  }
  struct timespec ts = {0, 100 * 1000 * 1000};
  syscall(SYS_futex, cmd, FUTEX_WAIT_PRIVATE, UR_CMD_IDLE, &ts, NULL, 0);
  errno = saved;
}

/* Arena collapsing (huge_arenas.h) gives way to the scanner and to requests. */
static int helper_wanted(void *cmd) {
  return __atomic_load_n((uint32_t *)cmd, __ATOMIC_ACQUIRE) != UR_CMD_IDLE ||
         __atomic_load_n(&ur_g.pending, __ATOMIC_ACQUIRE) != 0;
}

#define HUGE_ARENAS_PERIOD_NS (1000ull * 1000 * 1000) /* look for new whole ranges */
#define HUGE_ARENAS_AGAIN_NS (20ull * 1000 * 1000)    /* more left from the last step */

/* From 1 ms up to 20 ms: a quick scan's child is reaped at once, and a child
 * that lives long (or whose tracer never reaps it) costs 50 wakeups a second. */
#define CHILD_POLL_MIN_NS (1000 * 1000)
#define CHILD_POLL_MAX_NS (20 * 1000 * 1000)

static void wait_for_request_or_child(long *poll_ns) {
  int saved = errno;
  struct timespec ts = {0, *poll_ns};
  syscall(SYS_futex, &ur_g.pending, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
  *poll_ns = *poll_ns < CHILD_POLL_MAX_NS / 2 ? *poll_ns * 2 : CHILD_POLL_MAX_NS;
  errno = saved;
}

void ur_helper_request(uint32_t bits) {
  int saved = errno;
  __atomic_fetch_or(&ur_g.pending, bits, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &ur_g.pending, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  uint32_t *cmd = ur_g.helper_cmd;
  if (cmd) syscall(SYS_futex, cmd, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  errno = saved;
}

static void (*request_work)(uint32_t);

void ur_helper_on_requests(void (*work)(uint32_t requests)) {
  __atomic_store_n(&request_work, work, __ATOMIC_RELEASE);
}

/* Stepping aside (ur_helper_step_aside): the asker's word and the thread. */
enum { ASIDE_NONE, ASIDE_ASKED, ASIDE_GONE, ASIDE_REFUSED };
static uint32_t g_aside;
static pthread_t g_thread;
/* g_thread's state: none, being created (g_thread not yet valid), or a live
 * helper nobody has joined. Claimed with a CAS: the constructor, a forked
 * child's first allocation and a step aside may each start one. */
enum { HELPER_NONE, HELPER_STARTING, HELPER_RUNNING };
static int g_running;
static uint32_t g_tid;  /* its thread id */

/* Answers unless the asker gave up waiting (it then took the question back). */
static int answer_aside(uint32_t answer) {
  uint32_t asked = ASIDE_ASKED;
  if (!__atomic_compare_exchange_n(&g_aside, &asked, answer, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return 0;
  syscall(SYS_futex, &g_aside, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  return 1;
}

/* The helper's frames hold the shim's values only: the arena ranges it
 * collapses, size-map pages, and stale words of those below its SP. Taken as
 * roots they would keep a leaked block whose address one of them happens to
 * fall in, so a scan reads the helper's stack only above its frames (its
 * start frame, TLS and thread control block, which holds its DTV) and not
 * its registers. Not while it runs work the program asked for (dumps),
 * whose glibc calls may hold the program's blocks: 0 then. */
static void publish_frames(uint64_t top) {
  __atomic_store_n(&unreachable_descriptor.helper_frames, top, __ATOMIC_RELEASE);
}

/* Confinement (sandbox.h): the helper, seeing it, says so here before its
 * next system call, which is then a plain futex wait. */
static uint32_t g_confined_seen;

static void note_confined(void) {
  if (__atomic_load_n(&g_confined_seen, __ATOMIC_ACQUIRE)) return;
  __atomic_store_n(&g_confined_seen, 1, __ATOMIC_RELEASE);
  syscall(SYS_futex, &g_confined_seen, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *helper_main(void *arg) {
  (void)arg;
  prctl(PR_SET_NAME, "ur-helper", 0, 0, 0);
  uint32_t *cmd = ur_g.helper_cmd;
  g_tid = (uint32_t)syscall(SYS_gettid);
  uint64_t frames = (uint64_t)(uintptr_t)__builtin_frame_address(0);
  publish_frames(frames);
  __atomic_store_n(&unreachable_descriptor.helper_tid, g_tid, __ATOMIC_RELEASE);
  pid_t child = 0; /* local: a forked process's new helper starts without one */
  long poll_ns = CHILD_POLL_MIN_NS;
  int huge = ur_huge_arenas_wanted();
  uint64_t huge_due = 0, give_back_due = now_ns() + UR_GIVE_BACK_PERIOD_NS;
  for (;;) {
    if (ur_helper_confined()) note_confined();
    if (ur_write_tracking_requested()) {
      ur_tls.busy++;
      ur_write_tracking_begin();
      ur_tls.busy--;
      continue;
    }
    ur_tls.busy++;
    uint64_t tracking_ns = ur_write_tracking_check();
    ur_tls.busy--;
    /* The child first: a scanner letting us finish a previous snapshot
     * (snapshot.c finish_previous) waits for IDLE alone, not for requests. */
    if (child) {
      if (child_gone(child)) {
        child = 0;
        __atomic_store_n(cmd, UR_CMD_IDLE, __ATOMIC_RELEASE);
        continue;
      }
    } else {
      uint32_t c = __atomic_load_n(cmd, __ATOMIC_ACQUIRE);
      if (c != UR_CMD_IDLE) {
        if (c != UR_CMD_SNAPSHOT || (child = snapshot()) == 0)
          __atomic_store_n(cmd, UR_CMD_IDLE, __ATOMIC_RELEASE);
        poll_ns = CHILD_POLL_MIN_NS;
        continue;
      }
    }
    /* Not during a copy-on-write snapshot: a dump's writes and frees would
     * wait for the scanner, and the helper must stay free to end the
     * snapshot should the scanner die. */
    int cow = ur_write_tracking_cow();
    uint32_t req = cow ? 0 : __atomic_exchange_n(&ur_g.pending, 0, __ATOMIC_ACQ_REL);
    /* Confined, the helper makes no call an allowlist may refuse (its
     * filter would kill the process): the program's dumps and statistics
     * (files, sockets) are dropped, and the periodic checks below skipped. */
    int confined = ur_helper_confined();
    if ((req & ~UR_REQ_STEP_ASIDE) && !confined) {
      /* The helper's own work (dumps, stats, the notify socket): whatever
       * glibc allocates for it is registered as a nested call (busy). */
      ur_single_end(); /* dumps and stats enter glibc's allocator and its locks */
      ur_tls.busy++;
      void (*work)(uint32_t) = __atomic_load_n(&request_work, __ATOMIC_ACQUIRE);
      publish_frames(0);
      if (work) work(req & ~UR_REQ_STEP_ASIDE);
      publish_frames(frames);
      ur_tls.busy--;
    }
    if (req & UR_REQ_STEP_ASIDE) {
      /* Not while a scan needs us: its child to reap, writes to track. */
      int busy = child || tracking_ns || __atomic_load_n(cmd, __ATOMIC_ACQUIRE) != UR_CMD_IDLE;
      if (answer_aside(busy ? ASIDE_REFUSED : ASIDE_GONE) && !busy) {
        __atomic_store_n(&unreachable_descriptor.helper_tid, 0, __ATOMIC_RELEASE);
        publish_frames(0);
        ur_tls.busy++; /* what glibc frees as the thread ends: no slot, no record */
        return NULL;
      }
    }
    if (req) continue;
    if (child) {
      if (cow) {
        struct timespec ts = {0, CHILD_POLL_MAX_NS};
        nanosleep(&ts, NULL);
      } else {
        wait_for_request_or_child(&poll_ns);
      }
      continue;
    }
    /* Collapsing would fail on write-protected ranges and remember them done. */
    if (huge && !confined && !tracking_ns && now_ns() >= huge_due) {
      ur_tls.busy++;
      int more = ur_huge_arenas_step(helper_wanted, cmd);
      ur_tls.busy--;
      huge_due = now_ns() + (more ? HUGE_ARENAS_AGAIN_NS : HUGE_ARENAS_PERIOD_NS);
      continue;
    }
    /* Not while writes are tracked: the pages given back are written again. */
    if (!confined && !tracking_ns && now_ns() >= give_back_due) {
      ur_tls.busy++;
      ur_last_thread_check();
      ur_give_back_step();
      ur_tls.busy--;
      give_back_due = now_ns() + UR_GIVE_BACK_PERIOD_NS;
      continue;
    }
    uint64_t until = huge && huge_due < give_back_due ? huge_due : give_back_due;
    /* While writes are tracked neither runs, so their times, passed during
     * a long scan, are no deadline: the wait would return at once, and the
     * helper spun on one of the target's cores until the tracking ended. */
    if (tracking_ns) until = now_ns() + tracking_ns;
    if (confined) until = 0;
    wait_for_work(cmd, until, !cow);
  }
  return NULL;
}

/* ---- the helper's own blocks --------------------------------------------
 *
 * pthread_create allocates the new thread's DTV through the interposed
 * calloc. It is registered like any other block (the registry and glibc
 * agree on what is live) and freed through the registry, but it is the
 * shim's, not the program's: leak_track, heap dumps and malloc_iterate
 * leave these blocks out. The helper runs on a stack of the shim's own, so
 * glibc frees the DTV as the thread is joined (a glibc stack would keep it
 * in glibc's stack cache, for a program thread to inherit). */
#define OWN_MAX 16
static uint64_t g_own[OWN_MAX]; /* mangled */
static uint32_t g_own_n, g_own_mark;
/* Forked child: the parent helper's blocks, g_own[g_own_mark..g_own_n), wait
 * for the child's own helper to start (ur_helper_after_fork_child). */
static int g_own_stale;
static void *g_stack; /* the helper's stack, made once and reused */
/* A child of a raw clone (raw_clone.c), or of one of its descendants made
 * the same way: glibc's list of threads is the parent's, and a thread
 * started here would corrupt it. No helper, as under the program's own
 * filter; a fork() through glibc clears it. */
static int g_barred;
#define HELPER_STACK (256 * 1024 + 64 * 1024) /* room for static TLS above it */

void ur_helper_note_own(const void *p) {
  uint32_t n = __atomic_load_n(&g_own_n, __ATOMIC_RELAXED);
  if (n < OWN_MAX) {
    g_own[n] = UR_MANGLE(p);
    __atomic_store_n(&g_own_n, n + 1, __ATOMIC_RELEASE);
  }
}

int ur_helper_owns(uint64_t key) {
  uint32_t n = __atomic_load_n(&g_own_n, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n; i++)
    if (g_own[i] == key) return 1;
  return 0;
}

static int create_thread(pthread_attr_t *attr) {
  if (!g_stack) {
    void *m = mmap(NULL, HELPER_STACK, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m != MAP_FAILED) {
      mprotect(m, 4096, PROT_NONE); /* a guard page, as glibc's stacks have */
      g_stack = m;
    }
  }
  g_own_mark = g_own_n;
  int was_single = ur_single_before_helper();
  ur_tls.own_alloc++;
  int r = EINVAL;
  if (g_stack && pthread_attr_setstack(attr, g_stack, HELPER_STACK) == 0)
    r = pthread_create(&g_thread, attr, helper_main, NULL);
  if (r == EINVAL) { /* static TLS too big for our stack: glibc's, cached DTV and all */
    pthread_attr_t plain;
    pthread_attr_init(&plain);
    pthread_attr_setstacksize(&plain, 256 * 1024);
    g_own_mark = OWN_MAX; /* the DTV outlives the join */
    r = pthread_create(&g_thread, &plain, helper_main, NULL);
    pthread_attr_destroy(&plain);
  }
  ur_tls.own_alloc--;
  if (r == 0) ur_single_after_helper(was_single);
  return r;
}

static void confine(void);

void ur_helper_start(void) {
  int none = HELPER_NONE;
  /* A filter the program made for itself with no helper running (a forked
   * child's sandbox, vsftpd's): starting a thread would make calls its
   * allowlist kills on (rt_sigprocmask first). Scans sweep it stopped. */
  if (g_barred) return;
  if (__atomic_load_n(&ur_sandbox_own_filter, __ATOMIC_RELAXED)) {
    unreachable_descriptor.no_helper = UR_NO_HELPER_OWN_FILTER;
    return;
  }
  if (!ur_g.helper_cmd || !__atomic_compare_exchange_n(&g_running, &none, HELPER_STARTING, 0,
                                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  if (g_own_stale) {
    /* Inside the child's first allocator call: glibc's heap is whole. Before
     * the new helper reuses the stack and its DTV takes the same entries. */
    g_own_stale = 0;
    uint32_t n = g_own_n;
    g_own_n = g_own_mark;
    ur_tls.busy++; /* the program's free path (malloc_debug's header), not recorded */
    for (uint32_t i = g_own_mark; i < n; i++) free((void *)UR_UNMANGLE(g_own[i]));
    ur_tls.busy--;
  }
  /* The environment is read here, by the thread starting the helper, never
   * by the helper: a program may be rebuilding it (redis's setproctitle
   * clears and refills it as main starts), and the helper's getenv walked
   * the array glibc was freeing (SIGSEGV). The answer is cached. */
  (void)ur_huge_arenas_wanted();
  ur_self_maps_keep();
  ur_last_thread_keep();
  ur_sandbox_helper_starting();
  ur_sandbox_on_confine(confine);
  unreachable_descriptor.child_box = (uint64_t)(uintptr_t)&ur_child_box;
  unreachable_descriptor.write_tracker = (uint64_t)(uintptr_t)&ur_write_tracker;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old); /* the helper inherits a full mask */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  /* Joinable (the default): ur_helper_step_aside waits for its end. Room
   * for the dump writers and stdio (malloc_info) besides the snapshot. */
  __atomic_store_n(&g_confined_seen, 0, __ATOMIC_RELAXED);
  int created = create_thread(&attr) == 0;
  __atomic_store_n(&g_running, created ? HELPER_RUNNING : HELPER_NONE, __ATOMIC_RELEASE);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

#define CONFINE_WAIT_TRIES 200 /* of 10 ms: a scanner may hold the helper stopped */

/* The program puts a filter on every thread, the helper's too (sandbox.c,
 * TSYNC), right after this returns: wakes the helper and waits until it has
 * seen it is confined, so that its next call is one it may make. A helper
 * still starting sees it at its loop's top, past its start-up calls
 * (glibc's rseq and robust list, its name), which the filter would judge. */
static void confine(void) {
  uint32_t *cmd = ur_g.helper_cmd;
  if (__atomic_load_n(&g_running, __ATOMIC_ACQUIRE) == HELPER_NONE || !cmd) return;
  int saved = errno;
  for (int i = 0; i < CONFINE_WAIT_TRIES && !__atomic_load_n(&g_confined_seen, __ATOMIC_ACQUIRE) &&
                  __atomic_load_n(&g_running, __ATOMIC_ACQUIRE) != HELPER_NONE;
       i++) {
    /* It may sleep in futex_waitv, which a filter's allowlist rarely names:
     * a scan's stop would restart that call under the filter. */
    syscall(SYS_futex, cmd, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    struct timespec ts = {0, 10 * 1000 * 1000};
    syscall(SYS_futex, &g_confined_seen, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
  }
  errno = saved;
}

#define ASIDE_WAIT_NS (2000ull * 1000 * 1000) /* a scanner may hold the helper stopped */
#define GONE_WAIT_TRIES 100000

int ur_helper_step_aside(void) {
  int state = __atomic_load_n(&g_running, __ATOMIC_ACQUIRE);
  if (state != HELPER_RUNNING) return state == HELPER_NONE; /* another thread starts one */
  __atomic_store_n(&g_aside, ASIDE_ASKED, __ATOMIC_RELEASE);
  ur_helper_request(UR_REQ_STEP_ASIDE);
  int saved = errno;
  uint64_t deadline = now_ns() + ASIDE_WAIT_NS;
  uint32_t a;
  while ((a = __atomic_load_n(&g_aside, __ATOMIC_ACQUIRE)) == ASIDE_ASKED && now_ns() < deadline) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    syscall(SYS_futex, &g_aside, FUTEX_WAIT_PRIVATE, ASIDE_ASKED, &ts, NULL, 0);
  }
  /* Given up: take the question back, unless its answer came meanwhile (a then holds it). */
  if (a == ASIDE_ASKED)
    __atomic_compare_exchange_n(&g_aside, &a, ASIDE_NONE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (a != ASIDE_GONE) {
    errno = saved;
    return 0;
  }
  pthread_join(g_thread, NULL);
  /* Its DTV went back to glibc with the join (on our stack). */
  if (g_own_mark < OWN_MAX) __atomic_store_n(&g_own_n, g_own_mark, __ATOMIC_RELEASE);
  __atomic_store_n(&g_running, HELPER_NONE, __ATOMIC_RELEASE);
  /* join returns when the kernel clears the thread's tid, a moment before it
   * leaves the thread group, and the group's size is what the caller's
   * system call checks: wait until the tid is gone too. */
  for (int i = 0; i < GONE_WAIT_TRIES; i++) {
    if (syscall(SYS_tgkill, getpid(), (pid_t)g_tid, 0) != 0 && errno == ESRCH) break;
    sched_yield();
  }
  errno = saved;
  return 1;
}

/* The parent's helper did not come along, but its stack did: no thread
 * runs on it in the child, so a scan takes it for anonymous memory, a root,
 * and its frames hold the shim's values and stale words (publish_frames:
 * never roots). They are cleared: the bytes below the frames' top on its
 * page (the frames rarely go deeper), and the whole pages below dropped, so
 * that they read as zero (not under a seccomp filter, which may refuse the
 * call). The start frame, TLS and thread control block above stay (the
 * DTV). One page copied per forked child. */
static void clear_parent_frames(void) {
  uint64_t top = unreachable_descriptor.helper_frames;
  uint64_t lo = (uint64_t)(uintptr_t)g_stack + 4096; /* above the guard page */
  if (!g_stack || g_own_mark >= OWN_MAX || top <= lo || top > lo + HELPER_STACK) return;
  uint64_t page = top & ~(uint64_t)4095;
  memset((void *)(uintptr_t)page, 0, (size_t)(top - page));
  if (page <= lo || __atomic_load_n(&ur_sandbox_filtered, __ATOMIC_RELAXED)) return;
  int saved = errno;
  syscall(SYS_madvise, (void *)(uintptr_t)lo, (size_t)(page - lo), MADV_DONTNEED);
  errno = saved;
}

void ur_helper_after_fork_child(int glibc_forked) {
  if (g_running == HELPER_RUNNING) clear_parent_frames();
  /* The parent's helper did not come along, and glibc forgets a thread on
   * a stack of the caller's without freeing its DTV: give it back, through
   * the registry (nothing here points at it once a new helper reuses the
   * stack). On a glibc stack it stays, in the stack cache glibc keeps. Not
   * here but as the child's own helper starts: a fork from a signal handler
   * may have interrupted glibc's allocator, whose heap is mid-update in the
   * child, and a free now would corrupt it. */
  if (g_running == HELPER_RUNNING && g_own_mark < OWN_MAX) g_own_stale = 1;
  g_running = HELPER_NONE;
  g_aside = ASIDE_NONE;
  unreachable_descriptor.helper_tid = 0;
  unreachable_descriptor.helper_frames = 0;
  if (ur_g.helper_cmd) *ur_g.helper_cmd = UR_CMD_IDLE;
  ur_g.pending = 0; /* the parent's requests are the parent's */
  ur_write_tracking_after_fork_child();
  ur_self_maps_after_fork_child();
  ur_last_thread_after_fork_child();
  g_barred = !glibc_forked;
  unreachable_descriptor.no_helper = glibc_forked ? UR_NO_HELPER_NONE : UR_NO_HELPER_RAW_CLONE;
  if (glibc_forked) __atomic_fetch_or(&ur_g.slow, UR_SLOW_HELPER, __ATOMIC_RELEASE);
}
