/* A pre-login child's sandbox, as vsftpd's seccomp_sandbox sets one up: a
 * process that has allocated (the shim's helper runs) forks, and the child,
 * before it allocates anything, installs an allowlist of its own calls
 * (memory, futexes, reads and writes) that kills on any other, then
 * allocates on. The child has no helper yet: the shim starts one at the
 * child's first allocation, and starting a thread makes calls no such
 * allowlist names (rt_sigprocmask, clone3, set_robust_list, rseq).
 * Prints "child exited N" or "child killed by signal N"; exits 0 when the
 * child exited 0. argv[1] "syscall": the filter through the seccomp()
 * system call (libseccomp's way), else prctl(PR_SET_SECCOMP). */
#include <linux/audit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../support/c/seccomp_filter.h"

static void *volatile kept;

static int child(enum filter_route route) {
  static const int calls[] = {SYS_brk,   SYS_mmap,  SYS_munmap, SYS_mremap, SYS_madvise,
                              SYS_mprotect, SYS_futex, SYS_read, SYS_write,  SYS_close,
                              SYS_exit,  SYS_exit_group, SYS_getpid, SYS_gettid};
  if (allow_only(calls, sizeof calls / sizeof calls[0], SECCOMP_RET_KILL_PROCESS, route, 0) != 0)
    return 4;
  for (size_t i = 1; i <= 200; i++) {
    char *p = malloc(i * 24);
    if (!p) return 3;
    memset(p, 1, i * 24);
    if (i % 50) free(p);
    else kept = p;
  }
  static const char ok[] = "ok\n";
  return write(1, ok, sizeof ok - 1) == sizeof ok - 1 ? 0 : 3;
}

int main(int argc, char **argv) {
  enum filter_route route = argc > 1 && strcmp(argv[1], "syscall") == 0 ? FILTER_SYSCALL : FILTER_PRCTL;
  kept = malloc(100); /* the helper starts */
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 5;
  if (pid == 0) _exit(child(route));
  int status;
  if (waitpid(pid, &status, 0) != pid) return 5;
  if (WIFSIGNALED(status)) printf("child killed by signal %d\n", WTERMSIG(status));
  else printf("child exited %d\n", WEXITSTATUS(status));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
