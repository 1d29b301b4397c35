/*
 * leak_check_at_exit: LeakSanitizer's exit-time check, without a rebuild.
 *
 * A destructor of the shim runs the same scan the C/C++ interface runs
 * (memunreachable.c: the scanner started as a child, which ptraces this
 * process) when the process exits. The shim is preloaded, so the loader
 * finalizes it right after the executable: by then exit() has run the
 * program's atexit handlers and the executable's static destructors, whose
 * frees therefore count. Priority 101 puts it after the shim's own
 * destructor (malloc_debug's exit work), last of the shim's.
 *
 * Leaks left after suppressions (the scanner reads UNREACHABLE_SUPPRESSIONS
 * from the environment it inherits) are written to stderr and the process
 * exits with leak_check_exitcode (23, LeakSanitizer's) by calling exit()
 * again: glibc lets a nested exit() replace the status and go on with the
 * handlers left and the stdio flush, where _exit() would lose buffered
 * output. Destructors of libraries finalized after the shim do not run, as
 * with LeakSanitizer, whose _exit() skips them too. A check that cannot run
 * says why on stderr and leaves the exit status alone.
 *
 * Programs may close stderr in an atexit handler of their own (coreutils'
 * close_stdout does), so a copy of it is taken at start; the report goes to
 * fd 2 while it is open, else to that copy if it is still the same file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "options.h"
#include "shim.h"
#include "state.h"
#include "unreachable/memunreachable.h"

#define REPORT_LIMIT 100 /* entries printed; the totals count every leak */

static struct ur_options opts; /* 2 KiB of paths: not on a stack that may be small */
static int enabled;
static int saved_fd = -1; /* stderr as the program started */
static dev_t saved_dev;
static ino_t saved_ino;

/* Where the report goes: fd 2 while it is open, else the copy taken at
 * start if that number still names the same file, else nowhere (-1). */
static int report_fd(void) {
  if (fcntl(STDERR_FILENO, F_GETFD) >= 0) return STDERR_FILENO;
  struct stat st;
  if (saved_fd >= 0 && fstat(saved_fd, &st) == 0 && st.st_dev == saved_dev &&
      st.st_ino == saved_ino)
    return saved_fd;
  return -1;
}

static void put(int fd, const char *buf, size_t len) {
  while (fd >= 0 && len) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf += n;
    len -= (size_t)n;
  }
}

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) put(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int shim_active(void) {
  return ur_g.options && !(ur_load32(&ur_g.slow) & (UR_SLOW_INERT | UR_SLOW_UNINIT));
}

__attribute__((constructor)) static void ur_exit_check_start(void) {
  if (ur_load32(&ur_g.slow) & UR_SLOW_UNINIT) ur_init();
  if (!shim_active() || !ur_options_parse(ur_g.options, &opts, NULL, NULL, NULL) ||
      !opts.leak_check_at_exit)
    return;
  enabled = 1;
  struct stat st;
  int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd >= 0 && fstat(fd, &st) == 0) {
    saved_fd = fd;
    saved_dev = st.st_dev;
    saved_ino = st.st_ino;
  } else if (fd >= 0) {
    close(fd);
  }
}

__attribute__((destructor(101))) static void ur_exit_check(void) {
  if (!enabled || !shim_active()) return;
  struct unreachable_lmu_result r;
  long pid = (long)getpid();
  if (!unreachable_lmu_scan(0u, REPORT_LIMIT, &r)) {
    /* unreachable_lmu_scan logged the reason (to fd 2, if open). */
    say(report_fd(),
        "unreachable: pid %ld: the leak check at exit could not be done; exit status unchanged\n",
        pid);
    return;
  }
  uint64_t leaks = r.num_leaks, bytes = r.leak_bytes;
  if (leaks) {
    int fd = report_fd();
    say(fd,
        "=================================================================\n"
        "==%ld==ERROR: unreachable: detected memory leaks at exit\n\n",
        pid);
    put(fd, r.text, r.text_length);
    say(fd, "SUMMARY: unreachable: %" PRIu64 " byte(s) leaked in %" PRIu64 " allocation(s).\n",
        bytes, leaks);
  }
  unreachable_lmu_release(&r);
  if (leaks && opts.leak_check_exitcode) exit((int)opts.leak_check_exitcode);
}
