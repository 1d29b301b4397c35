/* vsftpd's pre-login child: an allowlist of its own calls (reads and
 * writes, memory, futexes, the clock), with no rt_sigprocmask in it, then
 * allocations on. With backtrace=N each allocation is unwound: the
 * unwinder, meeting code it has not unwound before (libc's qsort here,
 * then recursion of many depths), looks its unwind tables up with every
 * signal blocked around the lookup: a sigprocmask the filter kills on.
 * Exits 0 having allocated; killed by SIGSYS otherwise.
 *
 * argv[1]: "prctl" (the default) or "syscall": the route of the filter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../support/c/seccomp_filter.h"

static int by_value(const void *a, const void *b) {
  /* Called from inside libc's qsort: the allocation's stack goes through it. */
  free(malloc(32));
  return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) static void *deep(int n) {
  if (n == 0) return malloc(48);
  void *p = deep(n - 1);
  __asm__ volatile("" ::: "memory"); /* not a tail call: one frame a level */
  return p;
}

static int run(void) {
  int v[64];
  for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
  qsort(v, 64, sizeof v[0], by_value);
  for (int n = 0; n < 200; n++) free(deep(n % 40));
  static const char ok[] = "ok\n";
  return write(1, ok, sizeof ok - 1) == sizeof ok - 1 ? 0 : 3;
}

int main(int argc, char **argv) {
  const char *how = argc > 1 ? argv[1] : "prctl";
  free(malloc(10)); /* the shim and the unwinder are up before the filter */
  static const int calls[] = {SYS_brk,   SYS_mmap,     SYS_munmap,        SYS_mremap,
                              SYS_madvise, SYS_mprotect, SYS_futex,       SYS_read,
                              SYS_write, SYS_close,    SYS_exit,          SYS_exit_group,
                              SYS_getpid, SYS_gettid,  SYS_clock_gettime, SYS_rt_sigreturn, SYS_getrandom};
  if (allow_only(calls, sizeof calls / sizeof calls[0], SECCOMP_RET_KILL_PROCESS,
                 strcmp(how, "syscall") == 0 ? FILTER_SYSCALL : FILTER_PRCTL, 0) != 0) {
    perror("sandbox");
    return 2;
  }
  return run();
}
