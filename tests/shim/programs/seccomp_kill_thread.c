/* A one-thread program whose own seccomp filter kills the calling thread
 * (SECCOMP_RET_KILL_THREAD, what OpenSSH's sandbox returns) on a system
 * call it refuses. Its only thread killed, the kernel ends the process by
 * SIGSYS. argv[1]: "exit" ends the main thread with SYS_exit(7) instead,
 * which ends a one-thread process with status 7.
 *
 * argv[2], if given: "chroot:DIR" ends so inside a chroot to DIR (an empty
 * one has no /proc), and "fork:DIR" forks first and does so in the child
 * (sshd's preauth child: forked, chrooted, then sandboxed), the parent
 * ending as the child did. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../support/c/seccomp_filter.h"

static int sandbox(void) {
  return refuse_call(SYS_getppid, SECCOMP_RET_KILL_THREAD, FILTER_PRCTL, 0);
}

/* The parent of "fork:": ends as its child did. */
static int as_child(pid_t child) {
  int status;
  if (waitpid(child, &status, 0) != child) return 6;
  if (WIFSIGNALED(status)) {
    signal(WTERMSIG(status), SIG_DFL);
    raise(WTERMSIG(status));
  }
  return WEXITSTATUS(status);
}

static int enter(const char *where) {
  if (strncmp(where, "fork:", 5) == 0) {
    pid_t child = fork();
    if (child < 0) return 5;
    if (child > 0) exit(as_child(child));
    where += 5;
  } else if (strncmp(where, "chroot:", 7) == 0) {
    where += 7;
  }
  if (*where && (chroot(where) != 0 || chdir("/") != 0)) {
    perror("chroot");
    return 4;
  }
  void *volatile p = malloc(100); /* a forked child's helper starts: there, in the chroot */
  free(p);
  return 0;
}

int main(int argc, char **argv) {
  free(malloc(100)); /* the shim is up */
  int rc = argc > 2 ? enter(argv[2]) : 0;
  if (rc) return rc;
  if (argc > 1 && strcmp(argv[1], "exit") == 0) syscall(SYS_exit, 7);
  if (sandbox() != 0) {
    perror("sandbox");
    return 2;
  }
  syscall(SYS_getppid); /* refused: the thread is killed */
  return 3;
}
