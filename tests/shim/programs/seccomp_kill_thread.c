/* A one-thread program whose own seccomp filter kills the calling thread
 * (SECCOMP_RET_KILL_THREAD, what OpenSSH's sandbox returns) on a system
 * call it refuses. Its only thread killed, the kernel ends the process by
 * SIGSYS. argv[1]: "exit" ends the main thread with SYS_exit(7) instead,
 * which ends a one-thread process with status 7. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../support/c/seccomp_filter.h"

static int sandbox(void) {
  return refuse_call(SYS_getppid, SECCOMP_RET_KILL_THREAD, FILTER_PRCTL, 0);
}

int main(int argc, char **argv) {
  free(malloc(100)); /* the shim is up */
  if (argc > 1 && strcmp(argv[1], "exit") == 0) syscall(SYS_exit, 7);
  if (sandbox() != 0) {
    perror("sandbox");
    return 2;
  }
  syscall(SYS_getppid); /* refused: the thread is killed */
  return 3;
}
