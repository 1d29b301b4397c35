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
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "options.h"
#include "shim.h"
#include "unreachable/memunreachable.h"

#define REPORT_LIMIT 100 /* entries printed; the totals count every leak */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) ur_write_stderr(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

__attribute__((destructor(101))) static void ur_exit_check(void) {
  if (!ur_g.options || (ur_load32(&ur_g.slow) & (UR_SLOW_INERT | UR_SLOW_UNINIT))) return;
  static struct ur_options opts; /* 2 KiB of paths: not on a stack that may be small */
  if (!ur_options_parse(ur_g.options, &opts, NULL, NULL, NULL) || !opts.leak_check_at_exit)
    return;
  struct unreachable_lmu_result r;
  long pid = (long)getpid();
  if (!unreachable_lmu_scan(0u, REPORT_LIMIT, &r)) {
    /* unreachable_lmu_scan logged the reason. */
    say("unreachable: pid %ld: the leak check at exit could not be done; exit status unchanged\n",
        pid);
    return;
  }
  uint64_t leaks = r.num_leaks, bytes = r.leak_bytes;
  if (leaks) {
    say("=================================================================\n"
        "==%ld==ERROR: unreachable: detected memory leaks at exit\n\n",
        pid);
    ur_write_stderr(r.text, r.text_length);
    say("SUMMARY: unreachable: %" PRIu64 " byte(s) leaked in %" PRIu64 " allocation(s).\n",
        bytes, leaks);
  }
  unreachable_lmu_release(&r);
  if (leaks && opts.leak_check_exitcode) exit((int)opts.leak_check_exitcode);
}
