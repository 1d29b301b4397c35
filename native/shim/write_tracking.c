#include "write_tracking.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "self_maps.h"
#include "unreachable/write_protect.h"


#define POLL_NS (10 * 1000 * 1000) /* how soon a STOP or a vanished scanner is seen */

struct ur_write_tracker ur_write_tracker;
static int g_uffd = -1;
static int g_pagemap = -1; /* the helper's pagemap, while tracking starts */

/* A process that changed its uid (a daemon that dropped root) is not
 * dumpable, and its /proc/self/pagemap belongs to root: it cannot open it;
 * a chrooted one has no /proc. (Kept open from the start, a pagemap opened
 * as root would show a daemon that dropped root the physical frames.)
 * Its anonymous mappings are then protected whole, absent pages included,
 * up to this many bytes (the page tables built for absent pages cost 1/512
 * of it and stay); mappings past it are left untracked, which the scanner
 * reads again at the stop (present pages only). */
#define WHOLE_PROTECT_MAX ((uint64_t)4 << 30)
static uint64_t g_whole_protected;

uint32_t ur_write_tracking_word(void) {
  return __atomic_load_n(&ur_write_tracker.cmd, __ATOMIC_ACQUIRE);
}

int ur_write_tracking_requested(void) { return ur_write_tracking_word() == UR_TRACK_START; }

static uint64_t now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec;
}

/* User-mode faults only is all an unprivileged process may ask for
 * (vm.unprivileged_userfaultfd=0), and all asynchronous write protection
 * needs: the kernel resolves such faults itself, whoever takes them. */
static int open_uffd(void) {
  if (__atomic_load_n(&ur_write_tracker.reserved, __ATOMIC_RELAXED) == UR_TRACK_MODE_COW) {
    /* Synchronous protection for a copy-on-write snapshot: the scanner takes
     * this descriptor and registers and serves everything itself. Kernel-mode
     * faults (a read() into a protected page) must wait for it like any
     * other, which a user-mode-only descriptor cannot do (EFAULT). */
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -errno;
    /* The events say when memory the snapshot holds is released (munmap,
     * MADV_DONTNEED, mremap) before the scanner could save it. */
    struct uffdio_api api = {.api = UFFD_API,
                             .features = UFFD_FEATURE_EVENT_REMOVE |
                                         UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMAP};
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    return fd;
  }
  int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (fd < 0 && errno == EINVAL) fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -errno;
  struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC};
  if (ioctl(fd, UFFDIO_API, &api) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

/* Anonymous memory: only the pages that exist (write_protect.h). */
static int protect_present(uint64_t lo, uint64_t hi) {
  static struct page_region vec[256]; /* helper thread only */
  return ur_protect_present(g_pagemap, lo, hi, vec, sizeof vec / sizeof vec[0]);
}

/* Every private writable mapping: registered, then its pages
 * write-protected. One that refuses stays untracked, and the scanner
 * re-reads it whole. */
static int track_mapping(uint64_t lo, uint64_t hi, const char *rest, void *arg) {
  unsigned *n = arg;
  char perms[5];
  if (!ur_maps_perms(rest, perms) || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p')
    return 0;
  struct uffdio_register reg = {.range = {lo, hi - lo}, .mode = UFFDIO_REGISTER_MODE_WP};
  if (ioctl(g_uffd, UFFDIO_REGISTER, &reg) != 0) return 0;
  /* A file's absent page is not zero: the scanner's copy faults it in,
   * and only a marker keeps it protected then. Such mappings (a library's
   * .data) are small. */
  struct uffdio_writeprotect wp = {.range = {lo, hi - lo}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
  int anonymous = ur_maps_inode(rest) == 0, rc;
  if (anonymous && g_pagemap >= 0) {
    rc = protect_present(lo, hi);
  } else if (anonymous && g_whole_protected + (hi - lo) > WHOLE_PROTECT_MAX) {
    rc = -1;
  } else {
    rc = ioctl(g_uffd, UFFDIO_WRITEPROTECT, &wp);
    if (rc == 0 && anonymous) g_whole_protected += hi - lo;
  }
  if (rc == 0) {
    ++*n;
  } else {
    struct uffdio_range range = {lo, hi - lo};
    ioctl(g_uffd, UFFDIO_UNREGISTER, &range);
  }
  return 0;
}

/* Unregister [lo, hi) at a cost that follows its pages, not its size
 * (write_protect.h). */
static void unregister_mapping(uint64_t lo, uint64_t hi) {
  static struct page_region vec[256]; /* helper thread only */
  ur_unregister_present(g_uffd, g_pagemap, lo, hi, vec, sizeof vec / sizeof vec[0]);
}

/* Closing the descriptor unregisters too, but only once its last copy is
 * closed, and a child forked meanwhile without our atfork handler holds one
 * (so does a copy-on-write snapshot's scanner, stopped or not). */
static int untrack_mapping(uint64_t lo, uint64_t hi, const char *rest, void *arg) {
  (void)arg;
  char perms[5];
  /* A mapping with no access was never registered (only private writable
   * ones are), and one made so since holds no page a thread could fault
   * on: the descriptor's close unregisters it. A runtime's read-write
   * reservation (MariaDB's 8 TiB) is mostly a stretch without pages: in
   * 8 MiB pieces it kept the helper busy for seconds (1M pieces). */
  if (ur_maps_perms(rest, perms) && perms[0] == '-' && perms[1] == '-') return 0;
  unregister_mapping(lo, hi);
  return 0;
}

/* Every mapping still registered unregistered, through the pagemap where
 * it can be opened (thread-self: a process whose main thread exited has no
 * /proc/self/pagemap). */
static void untrack_all(void) {
  g_pagemap = open("/proc/thread-self/pagemap", O_RDONLY | O_CLOEXEC);
  ur_self_maps_foreach(untrack_mapping, NULL);
  if (g_pagemap >= 0) close(g_pagemap);
  g_pagemap = -1;
}

static int no_mapping(uint64_t lo, uint64_t hi, const char *rest, void *arg) {
  (void)lo;
  (void)hi;
  (void)rest;
  (void)arg;
  return 0;
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* The scanner, held by a pidfd taken when tracking starts: a pid alone
 * could be reused by another process within the 10 ms between checks. */
static int g_scanner_fd = -1;

static void hold_scanner(uint32_t pid) {
  g_scanner_fd = pid ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
}

/* A scanner in another pid namespace has no pid here: its heartbeat, and
 * when it last changed. */
static uint64_t g_beat, g_beat_ms;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void watch_heartbeat(void) {
  g_beat = __atomic_load_n(&ur_write_tracker.heartbeat, __ATOMIC_RELAXED);
  g_beat_ms = now_ms();
}

static int scanner_gone(uint32_t pid) {
  if (g_scanner_fd >= 0) {
    struct pollfd p = {.fd = g_scanner_fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0; /* readable once it has exited */
  }
  if (pid == 0) {
    uint64_t beat = __atomic_load_n(&ur_write_tracker.heartbeat, __ATOMIC_RELAXED);
    if (beat != g_beat) watch_heartbeat();
    return now_ms() - g_beat_ms > UR_TRACK_HEARTBEAT_MS;
  }
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static uint64_t g_deadline_s;

int ur_write_tracking_active(void) { return g_uffd >= 0; }

/* A copy-on-write snapshot's descriptor is held: the helper must then not
 * run anything that could write or release the program's memory (a dump's
 * allocations), since that waits for the scanner, and the helper is what
 * ends the snapshot if the scanner dies. */
static int g_cow;

int ur_write_tracking_cow(void) { return g_uffd >= 0 && g_cow; }

static void stop_tracking(void) {
  struct ur_write_tracker *t = &ur_write_tracker;
  if (g_scanner_fd >= 0) close(g_scanner_fd);
  g_scanner_fd = -1;
  untrack_all();
  close(g_uffd);
  g_uffd = -1;
  /* A new START (a scanner that came back) is kept for the next round. */
  uint32_t now = ur_write_tracking_word();
  if (now != UR_TRACK_START)
    __atomic_compare_exchange_n(&t->cmd, &now, UR_TRACK_IDLE, 0, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
}

void ur_write_tracking_begin(void) {
  struct ur_write_tracker *t = &ur_write_tracker;
  int saved = errno;
  if (g_uffd >= 0) stop_tracking(); /* a START while ON: its scanner started over */
  unsigned n = 0;
  int fd = open_uffd();
  uint64_t mode = __atomic_load_n(&t->reserved, __ATOMIC_RELAXED);
  int cow = mode == UR_TRACK_MODE_COW;
  /* The scanner arms through its duplicate of the descriptor: the page-table
   * walks then run in the scanner's scheduling group, not beside the
   * program's threads in ours. ranges stays 0 to say so. */
  int scanner_arms = mode == UR_TRACK_MODE_SCANNER;
  /* thread-self: a process whose main thread exited has no /proc/self/pagemap. */
  if (fd >= 0 && !cow && !scanner_arms)
    g_pagemap = open("/proc/thread-self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    g_uffd = fd;
    g_whole_protected = 0;
    g_cow = cow;
    /* Its maps are read even so: without them (a chrooted process that
     * closed the shim's descriptor) the helper could not take down what a
     * scanner that died left registered. */
    int rc = cow            ? 0
             : scanner_arms ? ur_self_maps_foreach(no_mapping, NULL)
                            : ur_self_maps_foreach(track_mapping, &n);
    if (cow) n = 1;
    if (g_pagemap >= 0) close(g_pagemap);
    g_pagemap = -1;
    if (rc < 0 || (n == 0 && !scanner_arms)) {
      untrack_all();
      close(fd);
      g_uffd = -1;
      fd = rc < 0 ? rc : -ENOENT;
    }
  }
  /* From START only: a scanner that gave up meanwhile wrote STOP. */
  uint32_t expected = UR_TRACK_START;
  if (fd < 0) {
    t->error = -fd;
    if (!__atomic_compare_exchange_n(&t->cmd, &expected, UR_TRACK_FAILED, 0, __ATOMIC_RELEASE,
                                     __ATOMIC_RELAXED) &&
        expected == UR_TRACK_STOP)
      __atomic_compare_exchange_n(&t->cmd, &expected, UR_TRACK_IDLE, 0, __ATOMIC_RELEASE,
                                  __ATOMIC_RELAXED);
    errno = saved;
    return;
  }
  t->ranges = n;
  t->error = 0;
  g_deadline_s = now_s() + UR_TRACK_MAX_SECONDS;
  hold_scanner(__atomic_load_n(&t->scanner_pid, __ATOMIC_RELAXED));
  watch_heartbeat();
  if (!__atomic_compare_exchange_n(&t->cmd, &expected, UR_TRACK_ON, 0, __ATOMIC_RELEASE,
                                   __ATOMIC_RELAXED))
    stop_tracking();
  errno = saved;
}

/* A copy-on-write snapshot's scanner beats too (write_tracking.py): one
 * that is alive but stopped (SIGSTOP, a debugger) serves no fault, and the
 * program's writers must not wait on it any longer than this. The scanner
 * then finds the tracker no longer ON and scans again over a classic copy. */
static int cow_unserved(void) {
  if (!g_cow) return 0;
  uint64_t beat = __atomic_load_n(&ur_write_tracker.heartbeat, __ATOMIC_RELAXED);
  if (beat != g_beat) watch_heartbeat();
  return now_ms() - g_beat_ms > UR_TRACK_HEARTBEAT_MS;
}

uint64_t ur_write_tracking_check(void) {
  if (g_uffd < 0) return 0;
  int saved = errno;
  /* Anything but ON ends it: STOP, or a scanner that restarted the protocol. */
  if (ur_write_tracking_word() != UR_TRACK_ON ||
      scanner_gone(__atomic_load_n(&ur_write_tracker.scanner_pid, __ATOMIC_RELAXED)) ||
      now_s() >= g_deadline_s || cow_unserved())
    stop_tracking();
  errno = saved;
  return g_uffd >= 0 ? POLL_NS : 0;
}

void ur_write_tracking_after_fork_child(void) {
  if (g_uffd >= 0) close(g_uffd);
  if (g_scanner_fd >= 0) close(g_scanner_fd);
  g_uffd = g_scanner_fd = -1;
  ur_write_tracker.cmd = UR_TRACK_IDLE;
}
