/* Runs a command under a seccomp filter that kills the process on
 * pidfd_getfd, as systemd's SystemCallFilter=@system-service does (the call
 * is in @debug): how the daemon's scans run under a unit without it. */
#include <stdio.h>
#include <unistd.h>

#include "../../support/c/seccomp_filter.h"

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (refuse_call(SYS_pidfd_getfd, SECCOMP_RET_KILL_PROCESS, FILTER_PRCTL, 0) != 0) {
    perror("seccomp");
    return 3;
  }
  execvp(argv[1], argv + 1);
  perror("execvp");
  return 4;
}
