/* A privilege-separated child's sandbox, as OpenSSH's preauth child sets
 * one up: after its start it installs a seccomp filter that allows only
 * what a worker needs (memory, futexes, reads and writes, the clock) and
 * kills on anything else, then allocates on. The allocations come through
 * a frame with no unwind information (a hand-written one here; a JIT's, or
 * code built without tables, in programs), where libunwind checks each
 * address before it reads it. Exits 0 having allocated; killed by SIGSYS
 * when anything it called made a system call the filter refuses. */
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

/* Calls fn(arg) from a frame that has a frame pointer and no CFI. */
__asm__(".text\n"
        ".globl no_cfi_call\n"
        ".type no_cfi_call,@function\n"
        "no_cfi_call:\n"
        "  push %rbp\n"
        "  mov %rsp, %rbp\n"
        "  mov %rdi, %rax\n"
        "  mov %rsi, %rdi\n"
        "  call *%rax\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size no_cfi_call, .-no_cfi_call\n");
void *no_cfi_call(void *(*fn)(void *), void *arg);

static void *allocate(void *arg) {
  size_t n = (size_t)arg;
  char *p = malloc(n);
  if (p) memset(p, 1, n);
  return p;
}

#define ALLOW(nr) \
  BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static int sandbox(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      ALLOW(SYS_brk), ALLOW(SYS_mmap), ALLOW(SYS_munmap), ALLOW(SYS_mremap),
      ALLOW(SYS_madvise), ALLOW(SYS_mprotect), ALLOW(SYS_futex), ALLOW(SYS_read),
      ALLOW(SYS_write), ALLOW(SYS_close), ALLOW(SYS_exit), ALLOW(SYS_exit_group),
      ALLOW(SYS_rt_sigprocmask), ALLOW(SYS_clock_gettime), ALLOW(SYS_gettimeofday),
      ALLOW(SYS_getpid), ALLOW(SYS_gettid), ALLOW(SYS_getrandom), ALLOW(SYS_nanosleep),
      ALLOW(SYS_clock_nanosleep), ALLOW(SYS_poll), ALLOW(SYS_ppoll),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
  };
  struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int main(void) {
  /* Before the sandbox, as the child's start does: the shim and the
   * unwinder are up, the frame without unwind information not yet seen. */
  free(allocate((void *)100));
  if (sandbox() != 0) {
    perror("sandbox");
    return 2;
  }
  for (size_t i = 1; i <= 200; i++) free(no_cfi_call(allocate, (void *)(i * 24)));
  static const char ok[] = "ok\n";
  return write(1, ok, sizeof ok - 1) == sizeof ok - 1 ? 0 : 3;
}
