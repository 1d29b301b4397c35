/* A heap like globals.c's, then a seccomp filter on every thread (the shim's
 * helper included, SECCOMP_FILTER_FLAG_TSYNC), chosen by argv[1]:
 *   kill-clone    clone kills the process; everything else allowed
 *   errno-uname   uname fails with EPERM; everything else allowed
 *   reads-ip      allows everything, after reading the instruction pointer
 * The scanner may fork a snapshot only when the filter provably lets the
 * helper's clone() through (native/scanner/seccomp_check.c). */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "scenario.h"

void *g_data = (void *)1;
void *g_bss;

__attribute__((noinline)) static void setup(void) {
  g_data = malloc(100);
  g_bss = malloc(200);
  void *lost = malloc(300);
  KEEP(lost);
}

#define NR offsetof(struct seccomp_data, nr)
#define ARCH offsetof(struct seccomp_data, arch)
#define IP offsetof(struct seccomp_data, instruction_pointer)

int main(int argc, char **argv) {
  setup();
  struct sock_filter kill_clone[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARCH),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_filter errno_uname[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_uname, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_filter reads_ip[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, IP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog;
  if (argc > 1 && strcmp(argv[1], "kill-clone") == 0)
    prog = (struct sock_fprog){sizeof(kill_clone) / sizeof(*kill_clone), kill_clone};
  else if (argc > 1 && strcmp(argv[1], "errno-uname") == 0)
    prog = (struct sock_fprog){sizeof(errno_uname) / sizeof(*errno_uname), errno_uname};
  else if (argc > 1 && strcmp(argv[1], "reads-ip") == 0)
    prog = (struct sock_fprog){sizeof(reads_ip) / sizeof(*reads_ip), reads_ip};
  else
    return 2;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
    perror("seccomp");
    return 1;
  }
  wipe();
  ready("leak_count=1 leak_bytes=300");
  wait_for_test();
  return 0;
}
