/* A privilege-separated child's sandbox, as OpenSSH's preauth child sets
 * one up: after its start it installs a seccomp filter that allows only
 * what a worker needs (memory, futexes, reads and writes, the clock) and
 * kills on anything else, then allocates on. The allocations come through
 * a frame with no unwind information (a hand-written one here; a JIT's, or
 * code built without tables, in programs), where libunwind checks each
 * address before it reads it. Exits 0 having allocated; killed by SIGSYS
 * when anything it called made a system call the filter refuses.
 *
 * argv[1] says how the filter comes: "prctl" (the default) or "syscall"
 * (the seccomp() system call, libseccomp's way) installs the worker's
 * filter; "inherited" installs one that kills on the unwinder's calls
 * (mincore, msync, pipe2) and allows the rest, then execs itself as "run",
 * which starts under it (a filter set by a parent, a container's) and
 * allocates as the others do. */
#include <linux/audit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../support/c/seccomp_filter.h"

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

static int sandbox(enum filter_route route) {
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
  return install_filter(&prog, route, 0);
}

static int run(void) {
  for (size_t i = 1; i <= 200; i++) free(no_cfi_call(allocate, (void *)(i * 24)));
  static const char ok[] = "ok\n";
  return write(1, ok, sizeof ok - 1) == sizeof ok - 1 ? 0 : 3;
}

int main(int argc, char **argv) {
  const char *how = argc > 1 ? argv[1] : "prctl";
  if (strcmp(how, "run") == 0) return run();
  /* Before the sandbox, as the child's start does: the shim and the
   * unwinder are up, the frame without unwind information not yet seen. */
  free(allocate((void *)100));
  if (strcmp(how, "inherited") == 0) {
    static const int unwinders[] = {SYS_mincore, SYS_msync, SYS_pipe2};
    if (refuse_calls(unwinders, 3, SECCOMP_RET_KILL_PROCESS, FILTER_PRCTL, 0) != 0) {
      perror("sandbox");
      return 2;
    }
    char *args[] = {argv[0], "run", NULL};
    execv("/proc/self/exe", args);
    perror("execv");
    return 4;
  }
  if (sandbox(strcmp(how, "syscall") == 0 ? FILTER_SYSCALL : FILTER_PRCTL) != 0) {
    perror("sandbox");
    return 2;
  }
  return run();
}
