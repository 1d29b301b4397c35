/* A one-thread program whose own seccomp filter kills the calling thread
 * (SECCOMP_RET_KILL_THREAD, what OpenSSH's sandbox returns) on a system
 * call it refuses. Its only thread killed, the kernel ends the process by
 * SIGSYS. argv[1]: "exit" ends the main thread with SYS_exit(7) instead,
 * which ends a one-thread process with status 7. */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int sandbox(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_THREAD),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
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
