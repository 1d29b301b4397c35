/* A program that confines every thread, the shim's helper included, with a
 * seccomp allowlist installed with SECCOMP_FILTER_FLAG_TSYNC through the
 * seccomp() call (as libseccomp's seccomp_load and Chrome's sandbox do):
 * only the calls the program itself makes are allowed, anything else kills
 * the process (SECCOMP_RET_KILL_PROCESS). One block leaked before.
 * argv[1] "clone": clone is allowed too (for threads, as allowlists grant
 * it), wait4 still not. Commands on stdin, each answered with a line: "alloc" (malloc and free
 * under the filter), "exit". */
#include <errno.h>
#include <sys/syscall.h>

#include "../../scan/programs/scenario.h"
#include "../../support/c/seccomp_filter.h"

static const int allowed[] = {
    SYS_read,          SYS_write,        SYS_exit,          SYS_exit_group,
    SYS_rt_sigreturn,  SYS_restart_syscall, SYS_futex,      SYS_brk,
    SYS_mmap,          SYS_munmap,       SYS_mprotect,      SYS_madvise,
    SYS_clock_gettime, SYS_clock_nanosleep, SYS_nanosleep,  SYS_getpid,
    SYS_gettid,        SYS_rt_sigprocmask, SYS_sched_yield, SYS_fstat,
    SYS_newfstatat,    SYS_clone, /* the last: only with "clone" */
};

__attribute__((noinline)) static void setup(void) {
  KEEP(malloc(300));
  void *p = malloc(5000);
  KEEP(p);
  free(p);
}

int main(int argc, char **argv) {
  unsigned n = sizeof allowed / sizeof *allowed;
  if (argc < 2 || strcmp(argv[1], "clone") != 0) n--;
  setup();
  wipe();
  if (allow_only(allowed, n, SECCOMP_RET_KILL_PROCESS,
                 FILTER_SYSCALL, SECCOMP_FILTER_FLAG_TSYNC) != 0) {
    printf("FILTER-FAILED errno=%d\n", errno);
    return 3;
  }
  ready("leak_count=1 leak_bytes=300");
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "alloc", 5) == 0) {
      void *volatile q = malloc(100);
      free(q);
      printf("ALLOCATED\n");
      fflush(stdout);
    } else if (strncmp(line, "exit", 4) == 0) {
      break;
    }
  }
  return 0;
}
