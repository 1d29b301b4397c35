/* A heap like globals.c's, then a seccomp filter on every thread (the shim's
 * helper included, SECCOMP_FILTER_FLAG_TSYNC), chosen by argv[1]:
 *   kill-clone    clone kills the process; everything else allowed
 *   errno-uname   uname fails with EPERM; everything else allowed
 *   reads-ip      allows everything, after reading the instruction pointer
 * or, compiled by libseccomp (as systemd's SystemCallFilter= is; loaded with
 * dlopen, so no headers are needed; exit 3 if it is not there):
 *   lib-newuser   clone kills when its flags ask for CLONE_NEWUSER
 *   lib-fork      clone kills when its flags lack CLONE_THREAD (a fork)
 * The scanner may fork a snapshot only when the filter provably lets the
 * helper's clone() through (native/scanner/seccomp_check.c). */
#include <dlfcn.h>
#include <linux/audit.h>
#include <sched.h>
#include <stdint.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "scenario.h"

#include "globals_heap.h"

/* libseccomp's ABI (seccomp.h), for dlopen. */
struct scmp_arg_cmp {
  unsigned int arg;
  int op; /* enum scmp_compare */
  uint64_t datum_a, datum_b;
};
#define SCMP_CMP_MASKED_EQ 7
#define SCMP_FLTATR_CTL_TSYNC 4
#define SCMP_ACT_ALLOW 0x7fff0000U
#define SCMP_ACT_KILL_PROCESS 0x80000000U

/* clone() kills when (flags & mask) == value; everything else allowed. */
static int load_libseccomp(uint64_t mask, uint64_t value) {
  void *lib = dlopen("libseccomp.so.2", RTLD_NOW);
  if (!lib) return 3;
  void *(*init)(uint32_t) = (void *(*)(uint32_t))dlsym(lib, "seccomp_init");
  int (*attr_set)(void *, int, uint32_t) = (int (*)(void *, int, uint32_t))dlsym(lib, "seccomp_attr_set");
  int (*rule_add)(void *, uint32_t, int, unsigned, ...) =
      (int (*)(void *, uint32_t, int, unsigned, ...))dlsym(lib, "seccomp_rule_add");
  int (*load)(void *) = (int (*)(void *))dlsym(lib, "seccomp_load");
  void (*release)(void *) = (void (*)(void *))dlsym(lib, "seccomp_release");
  if (!init || !attr_set || !rule_add || !load || !release) return 3;
  void *ctx = init(SCMP_ACT_ALLOW);
  struct scmp_arg_cmp flags = {0, SCMP_CMP_MASKED_EQ, mask, value};
  if (!ctx || attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1) != 0 ||
      rule_add(ctx, SCMP_ACT_KILL_PROCESS, SYS_reboot, 0) != 0 ||
      rule_add(ctx, SCMP_ACT_KILL_PROCESS, SYS_clone, 1, flags) != 0 || load(ctx) != 0)
    return 1;
  release(ctx); /* its memory would be leaks of our own */
  return 0;
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
  if (argc > 1 && strncmp(argv[1], "lib-", 4) == 0) {
    int rc = strcmp(argv[1], "lib-newuser") == 0 ? load_libseccomp(CLONE_NEWUSER, CLONE_NEWUSER)
             : strcmp(argv[1], "lib-fork") == 0  ? load_libseccomp(CLONE_THREAD, 0)
                                                  : 2;
    if (rc) return rc;
    wipe();
    ready("leak_count=1 leak_bytes=300");
    wait_for_test();
    return 0;
  }
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
