/* A process that forks as vsftpd isolates its sessions: by
 * syscall(SYS_clone, flags, NULL), past glibc's fork and its atfork
 * handlers. It allocates first, so the shim's helper runs (and may hold a
 * lock at the clone). The child allocates, leaks 40 bytes, prints
 * "READY leak_count=1 leak_bytes=40 child=PID" and waits for stdin to
 * close; the parent waits for it. argv[1] "newpid" adds CLONE_NEWPID (the
 * child is pid 1 of its own namespace), else CLONE_NEWIPC. */
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "../../scan/programs/scenario.h"

static void *volatile kept;

__attribute__((noinline)) static void child_leaks(void) {
  char *p = malloc(40);
  KEEP(p);
}

int main(int argc, char **argv) {
  long flags = SIGCHLD | (argc > 1 && strcmp(argv[1], "newpid") == 0 ? CLONE_NEWPID : CLONE_NEWIPC);
  for (int i = 0; i < 1000; i++) free(malloc(64)); /* the helper starts */
  kept = malloc(100);
  long pid = syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
  if (pid < 0) {
    perror("clone");
    return 2;
  }
  if (pid == 0) {
    for (int i = 0; i < 1000; i++) free(malloc(64 + (size_t)i));
    child_leaks();
    wipe();
    ready("leak_count=1 leak_bytes=40 child=%d", (int)syscall(SYS_getpid));
    wait_for_test();
    _exit(0);
  }
  int status;
  return waitpid((pid_t)pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}
