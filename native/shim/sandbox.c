/*
 * A thread under a seccomp filter the program installed (OpenSSH's preauth
 * child, a privilege-separated worker) may make only the system calls the
 * filter allows, and the shim's calls count as the program's. libunwind,
 * reaching a frame with no unwind information, checks each address it reads
 * with mincore() (or msync(), where its first mincore() failed) and then a
 * byte through its pipe: sshd's filter allows none of them, and kills the
 * thread on the first (the preauth child killed, the helper thread keeping
 * the process alive, the login hung). Once the process is under a filter,
 * libunwind's checks are answered "not mapped" without the call: the
 * backtrace ends at that frame, as at any address it cannot read. Its pipe
 * is not made either (unwinder_fds.c asks ur_unwinder_sandboxed). Looking
 * up the unwind tables of code it has not unwound before, libunwind blocks
 * every signal around dl_iterate_phdr (sigprocmask, twice), which an
 * allowlist of the program's own calls rarely grants (vsftpd's pre-login
 * child): under a filter those calls of libunwind's are answered without
 * the call, decided once for each such section (sigprocmask below). The
 * mask guards against a signal handler's unwind nesting in
 * the lookup; the shim's never does (a nested call takes no backtrace,
 * unwind.h), and glibc's dl_iterate_phdr lock is recursive.
 *
 * A filter comes three ways, all seen here: prctl(PR_SET_SECCOMP); the
 * seccomp() system call through syscall() (glibc has no wrapper; libseccomp
 * and minijail call it so); and from before the program started (a filter
 * set by a parent before exec, a container's or a service manager's):
 * /proc/self/status says so as the shim starts, and where it cannot be
 * read (no /proc) the process is taken as filtered. A filter is for good,
 * and a forked child inherits both the filter and this flag.
 */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "raw_clone.h"
#include "raw_syscall.h"
#include "region.h"
#include "stacks.h"

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

int ur_sandbox_filtered;
int ur_sandbox_own_filter;
int ur_sandbox_helper_confined;

/* Sequentially consistent: against sigprocmask's count of sections whose
 * mask was made for real (masked_for_real). */
static void note_filter(void) { __atomic_store_n(&ur_sandbox_filtered, 1, __ATOMIC_SEQ_CST); }

/* Threads inside a signal-blocking section of libunwind's whose blocking
 * call was made for real: its restoring call will be too. */
static uint32_t masked_for_real;

#define MASK_WAIT_TRIES 20000 /* of 100 us: 2 s, as the helper's confinement */

/* Before a filter goes on every thread (TSYNC): until no thread is inside
 * such a section, whose restoring call the filter would then judge. A
 * section ends within one dl_iterate_phdr; past the bound (a thread held
 * there: stopped by a debugger) the filter goes in anyway. */
static void wait_for_masked_sections(void) {
  struct timespec pause = {0, 100000};
  for (int i = 0; i < MASK_WAIT_TRIES && __atomic_load_n(&masked_for_real, __ATOMIC_SEQ_CST); i++)
    nanosleep(&pause, NULL);
}

/* Before the filter goes in: the region commits its room while it still
 * may (region.h). */
static void note_own_filter(void) {
  note_filter();
  ur_stacks_stop_growing();
  ur_region_fix();
  __atomic_store_n(&ur_sandbox_own_filter, 1, __ATOMIC_RELAXED);
}

/* The "Seccomp:" field of a status file: 0 none, 1 strict, 2 filter; -1
 * unreadable (a chroot without /proc). */
static int seccomp_mode(const char *path) {
  int saved = errno;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  char buf[4096];
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  errno = saved;
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char *line = strstr(buf, "\nSeccomp:");
  if (!line) return 0; /* a kernel without seccomp */
  line += sizeof "\nSeccomp:" - 1;
  while (*line == ' ' || *line == '\t') line++;
  return *line - '0';
}

static void (*on_confine)(void);

void ur_sandbox_on_confine(void (*fn)(void)) { __atomic_store_n(&on_confine, fn, __ATOMIC_RELEASE); }

/* A new thread inherits its creator's filters: the helper starts confined
 * if the thread starting it is filtered. */
void ur_sandbox_helper_starting(void) {
  __atomic_store_n(&ur_sandbox_helper_confined, seccomp_mode("/proc/thread-self/status") > 0,
                   __ATOMIC_RELAXED);
}

void ur_sandbox_init(void) {
  /* Unreadable: a check made without the call is the safe side. */
  if (seccomp_mode("/proc/self/status") != 0) note_filter();
}

UR_EXPORT int prctl(int option, ...) {
  va_list ap;
  va_start(ap, option);
  unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
  unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
  va_end(ap);
  /* Set before the call: once it returns, every call this thread makes is
   * the filter's to judge. */
  if (option == PR_SET_SECCOMP) note_own_filter();
  return (int)syscall(SYS_prctl, option, a2, a3, a4, a5);
}

/* glibc's syscall() as its assembly does it: six arguments taken whatever
 * the caller passed (the unused ones are registers and the caller's stack),
 * -1 and errno for the kernel's -4095..-1. A clone() that forks runs the
 * shim's fork handlers around it (raw_clone.c). */
UR_EXPORT long syscall(long nr, ...) {
  va_list ap;
  va_start(ap, nr);
  long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
  long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
  va_end(ap);
  if (UR_UNLIKELY(nr == SYS_seccomp || nr == SYS_prctl) &&
      ((nr == SYS_seccomp && (a == SECCOMP_SET_MODE_FILTER || a == SECCOMP_SET_MODE_STRICT)) ||
       (nr == SYS_prctl && a == PR_SET_SECCOMP))) {
    note_own_filter();
    /* Every thread of the process, the helper too (helper.c: confined). */
    if (nr == SYS_seccomp && a == SECCOMP_SET_MODE_FILTER && (b & SECCOMP_FILTER_FLAG_TSYNC)) {
      int saved = errno;
      wait_for_masked_sections();
      errno = saved;
      __atomic_store_n(&ur_sandbox_helper_confined, 1, __ATOMIC_RELAXED);
      void (*confine)(void) = __atomic_load_n(&on_confine, __ATOMIC_ACQUIRE);
      if (confine) confine();
    }
  }
  int filtered = __atomic_load_n(&ur_sandbox_filtered, __ATOMIC_RELAXED);
  long r = UR_UNLIKELY(nr == SYS_clone || nr == SYS_clone3) &&
                   ur_raw_clone_forks(nr, a, b, filtered)
               ? ur_raw_clone_fork(nr, a, b, c, d, e, f)
               : ur_sys6(nr, a, b, c, d, e, f);
  if (ur_sys_failed(r)) {
    errno = (int)-r;
    return -1;
  }
  return r;
}

UR_EXPORT int mincore(void *addr, size_t length, unsigned char *vec) {
  if (UR_UNLIKELY(ur_unwinder_sandboxed())) {
    errno = ENOMEM;
    return -1;
  }
  return (int)syscall(SYS_mincore, addr, length, vec);
}

UR_EXPORT int msync(void *addr, size_t length, int flags) {
  if (UR_UNLIKELY(ur_unwinder_sandboxed())) {
    errno = ENOMEM;
    return -1;
  }
  /* glibc's msync is a cancellation point: a cancellation already asked
   * for is acted on here as there (one arriving during the call waits for
   * the next point). */
  pthread_testcancel();
  return (int)syscall(SYS_msync, addr, length, flags);
}

/* libunwind's sections: a blocking call (old asked for: every signal
 * blocked) opens one, a restoring call (old NULL) closes it, and a lock
 * taken inside nests a section in it. The outermost blocking call decides
 * for the whole section, its restoring call included: made, or answered
 * without the call when the process is filtered. Decided per call, a filter
 * put on every thread by another thread between the two (TSYNC) left this
 * thread with every signal blocked for good: its blocking call made, its
 * restoring call answered. Where the section's calls are made, the filter
 * could kill on the restoring one (an allowlist without rt_sigprocmask),
 * so syscall() holds such a filter back until no section made for real is
 * open (wait_for_masked_sections): the counter is raised before the filter
 * flag is read here, and the flag set before the counter is read there, so
 * one of the two sees the other. A filter the shim does not see installed
 * (a raw seccomp instruction) can still come between: the restoring call
 * is then made, as a kill is no worse than a thread deaf to every signal.
 * Returns whether the call is answered without being made. */
static int unwinder_mask(const sigset_t *set, sigset_t *old) {
  int opening = old != NULL && set != NULL;
  if (opening && ur_tls.mask_depth++ == 0) {
    __atomic_fetch_add(&masked_for_real, 1, __ATOMIC_SEQ_CST);
    ur_tls.mask_real = !__atomic_load_n(&ur_sandbox_filtered, __ATOMIC_SEQ_CST);
    if (!ur_tls.mask_real) __atomic_fetch_sub(&masked_for_real, 1, __ATOMIC_SEQ_CST);
  }
  /* Outside any section (a query, or a restore with none open): as the
   * flag says now. */
  int answered = ur_tls.mask_depth ? !ur_tls.mask_real
                                   : __atomic_load_n(&ur_sandbox_filtered, __ATOMIC_RELAXED);
  if (answered && old) sigemptyset(old); /* restored by a call answered the same way */
  return answered;
}

/* After the call a closing one made or answered. */
static void unwinder_mask_closed(const sigset_t *old) {
  if (old != NULL || ur_tls.mask_depth == 0 || --ur_tls.mask_depth) return;
  if (ur_tls.mask_real) __atomic_fetch_sub(&masked_for_real, 1, __ATOMIC_SEQ_CST);
  ur_tls.mask_real = 0;
}

UR_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
  if (UR_UNLIKELY(ur_tls.unwinding)) {
    int answered = unwinder_mask(set, old);
    int r = answered ? 0 : pthread_sigmask(how, set, old);
    unwinder_mask_closed(old);
    if (r == 0) return 0;
    errno = r;
    return -1;
  }
  /* glibc's sigprocmask is its pthread_sigmask with errno (which keeps
   * its own cancellation and set*id signals out of the set). */
  int r = pthread_sigmask(how, set, old);
  if (r == 0) return 0;
  errno = r;
  return -1;
}
