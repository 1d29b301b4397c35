/* vsftpd's session under seccomp_sandbox=YES: an allowlist of the program's
 * own calls, installed with prctl, that grants mprotect only with PROT_READ,
 * then allocations on, enough to grow the shim's registry past the room it
 * had. Growing its region by mprotect(PROT_READ | PROT_WRITE) is a call the
 * filter kills on (SIGSYS); the shim grows it no more under such a filter.
 * A few blocks leak before the filter, the rest stay reachable.
 * argv[1]: how many 32-byte blocks to allocate under the filter. Prints
 * READY, then waits for stdin to close and exits 0; killed otherwise. */
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "../../scan/programs/scenario.h"
#include "../../support/c/seccomp_filter.h"

static const int allowed[] = {
    SYS_read,  SYS_write,        SYS_exit,        SYS_exit_group,    SYS_rt_sigreturn,
    SYS_futex, SYS_brk,          SYS_mmap,        SYS_munmap,        SYS_getpid,
    SYS_gettid, SYS_clock_gettime, SYS_restart_syscall, SYS_fstat,  SYS_newfstatat,
};

static void **blocks;

__attribute__((noinline)) static void setup(void) {
  for (int i = 0; i < 3; i++) KEEP(malloc(100));
}

int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 4000000;
  blocks = malloc((size_t)n * sizeof *blocks);
  if (!blocks) return 4;
  setup();
  wipe();
  if (allow_only_with_arg(allowed, sizeof allowed / sizeof *allowed, SYS_mprotect, PROT_READ,
                          SECCOMP_RET_KILL_PROCESS, FILTER_PRCTL, 0) != 0) {
    printf("FILTER-FAILED errno=%d\n", errno);
    return 3;
  }
  for (long i = 0; i < n; i++) blocks[i] = malloc(32);
  ready("leak_count=3 leak_bytes=300 blocks=%ld", n);
  wait_for_test();
  return 0;
}
