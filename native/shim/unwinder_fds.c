/*
 * The unwinder's descriptors, kept out of the program's way.
 *
 * libunwind checks that an address is readable by writing a byte from it
 * into a pipe of its own and reading it back (see
 * https://github.com/libunwind/libunwind/issues/274). A
 * daemon that closes every descriptor above stderr (closefrom, close_range,
 * a loop of close) closes that pipe without libunwind knowing; the program's
 * next pipe or socket takes the same numbers, and libunwind then reads the
 * program's data and writes bytes into it (varnishd's child would lose its
 * listening socket under backtrace=16). So the pipe libunwind makes is moved
 * to high numbers, and the program's closes pass it by: close() of it
 * succeeds without closing it, closefrom() and close_range() close around
 * it. libunwind itself may still close it (it makes a new one then).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox.h"
#include "state.h"
#include "unwind.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* Below a default soft limit of 1024, above what most programs reach. */
#define HIGH_FD 1000

static int g_fds[2] = {-1, -1};

/* glibc's close (a cancellation point), which ours stands in front of. */
extern int __close(int fd);

/* Whether a return address lies in libunwind (the object that defines
 * unw_backtrace). */
static int from_libunwind(void *ret) {
  static void *base;
  Dl_info self, caller;
  if (!base && dladdr((void *)&unw_backtrace, &self)) base = self.dli_fbase;
  return base && dladdr(ret, &caller) && caller.dli_fbase == base;
}

static int ours(int fd) {
  if (fd < 0) return -1;
  for (int i = 0; i < 2; i++)
    if (fd == __atomic_load_n(&g_fds[i], __ATOMIC_RELAXED)) return i;
  return -1;
}

static int move_high(int fd) {
  struct rlimit rl;
  int floor = HIGH_FD;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur <= HIGH_FD) floor = (int)rl.rlim_cur / 2;
  int high = floor > fd ? fcntl(fd, F_DUPFD_CLOEXEC, floor) : -1;
  if (high < 0) return fd;
  __close(fd);
  return high;
}

UR_EXPORT int pipe2(int fds[2], int flags) {
  /* libunwind's, under a filter: its checks are answered without it. */
  if (UR_UNLIKELY(ur_unwinder_sandboxed())) {
    errno = EMFILE;
    return -1;
  }
  if (syscall(SYS_pipe2, fds, flags) != 0) return -1;
  if (flags == (O_CLOEXEC | O_NONBLOCK) && from_libunwind(__builtin_return_address(0))) {
    fds[0] = move_high(fds[0]);
    fds[1] = move_high(fds[1]);
    __atomic_store_n(&g_fds[0], fds[0], __ATOMIC_RELAXED);
    __atomic_store_n(&g_fds[1], fds[1], __ATOMIC_RELAXED);
  }
  return 0;
}

UR_EXPORT int close(int fd) {
  int i = ours(fd);
  if (UR_UNLIKELY(i >= 0)) {
    if (!from_libunwind(__builtin_return_address(0))) return 0;
    __atomic_compare_exchange_n(&g_fds[i], &fd, -1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  }
  return __close(fd);
}

/* close_range over [first, last] without our descriptors. */
static int close_around(unsigned first, unsigned last, int flags) {
  int lo = __atomic_load_n(&g_fds[0], __ATOMIC_RELAXED);
  int hi = __atomic_load_n(&g_fds[1], __ATOMIC_RELAXED);
  if (lo > hi) {
    int t = lo;
    lo = hi;
    hi = t;
  }
  unsigned cuts[2] = {(unsigned)lo, (unsigned)hi};
  unsigned from = first;
  for (int i = 0; i < 2; i++) {
    if (cuts[i] == (unsigned)-1 || cuts[i] < from || cuts[i] > last) continue;
    if (cuts[i] > from && syscall(SYS_close_range, from, cuts[i] - 1, flags) != 0) return -1;
    if (cuts[i] == last) return 0;
    from = cuts[i] + 1;
  }
  return (int)syscall(SYS_close_range, from, last, flags);
}

UR_EXPORT int close_range(unsigned first, unsigned last, int flags) {
  if (first > last) {
    errno = EINVAL;
    return -1;
  }
  return close_around(first, last, flags);
}

UR_EXPORT void closefrom(int lowfd) {
  if (lowfd < 0) lowfd = 0;
  if (close_around((unsigned)lowfd, ~0U, 0) == 0 || errno != ENOSYS) return;
  /* A kernel before 5.9: glibc's own fallback (ours are then closed too). */
  void (*next)(int) = (void (*)(int))dlsym(RTLD_NEXT, "closefrom");
  if (next) next(lowfd);
}
