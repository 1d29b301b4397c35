/* Runs argv[1...] under a seccomp filter that allows every call: a scanner
 * under a filter of its own, as a hardened service's (SystemCallFilter=)
 * is, may not read its targets' filters (PTRACE_SECCOMP_GET_FILTER). */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  struct sock_fprog prog = {1, allow};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
    perror("seccomp");
    return 1;
  }
  execvp(argv[1], argv + 1);
  perror("execvp");
  return 127;
}
