#include "seccomp_check.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <unistd.h>

#ifndef PTRACE_SECCOMP_GET_FILTER
#define PTRACE_SECCOMP_GET_FILTER 0x420c
#endif

#if defined(__x86_64__)
#define UR_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define UR_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#define MAX_INSNS 4096 /* BPF_MAXINSNS */

/* Read whole with read(), not stdio: it is asked of every thread in a stop. */
int ur_seccomp_mode(pid_t pid, pid_t tid) {
  char path[96], text[4096];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = 0;
  ssize_t r;
  while (n < sizeof(text) - 1 && ((r = read(fd, text + n, sizeof(text) - 1 - n)) > 0 ||
                                  (r < 0 && errno == EINTR)))
    if (r > 0) n += (size_t)r;
  close(fd);
  text[n] = 0;
  const char *at = strstr(text, "\nSeccomp:");
  int mode = -1;
  if (!at || sscanf(at + 1, "Seccomp: %d", &mode) != 1) return -1;
  return mode;
}

/* Word k of struct seccomp_data (nr, arch, ip, args[6]), if knowable. */
static int load_word(uint32_t k, uint32_t nr, uint32_t arch, const uint64_t *args, unsigned known,
                     uint32_t *out) {
  if (k % 4 || k >= sizeof(struct seccomp_data)) return 0;
  if (k == offsetof(struct seccomp_data, nr)) {
    *out = nr;
  } else if (k == offsetof(struct seccomp_data, arch)) {
    *out = arch;
  } else if (k < offsetof(struct seccomp_data, args)) {
    return 0; /* instruction_pointer */
  } else {
    uint32_t i = (k - (uint32_t)offsetof(struct seccomp_data, args)) / 8;
    if (i >= UR_SECCOMP_ARGS_KNOWN || !(known & (1u << i))) return 0;
    int high = (k - (uint32_t)offsetof(struct seccomp_data, args)) % 8 != 0;
    *out = (uint32_t)(args[i] >> (high ? 32 : 0)); /* little endian */
  }
  return 1;
}

static int run_known(const struct sock_filter *prog, size_t n, uint32_t nr, uint32_t arch,
                     const uint64_t args[UR_SECCOMP_ARGS_KNOWN], unsigned known, uint32_t *ret) {
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};
  for (size_t pc = 0; pc < n; pc++) {
    const struct sock_filter *f = &prog[pc];
    uint32_t k = f->k, src = BPF_SRC(f->code) == BPF_X ? x : k;
    switch (BPF_CLASS(f->code)) {
    case BPF_LD:
    case BPF_LDX: {
      uint32_t v;
      switch (BPF_MODE(f->code)) {
      case BPF_ABS:
        if (BPF_SIZE(f->code) != BPF_W || !load_word(k, nr, arch, args, known, &v)) return 0;
        break;
      case BPF_LEN: v = sizeof(struct seccomp_data); break;
      case BPF_IMM: v = k; break;
      case BPF_MEM:
        if (k >= BPF_MEMWORDS) return 0;
        v = mem[k];
        break;
      default: return 0;
      }
      if (BPF_CLASS(f->code) == BPF_LD) a = v;
      else x = v;
      break;
    }
    case BPF_ST:
    case BPF_STX:
      if (k >= BPF_MEMWORDS) return 0;
      mem[k] = BPF_CLASS(f->code) == BPF_ST ? a : x;
      break;
    case BPF_ALU:
      switch (BPF_OP(f->code)) {
      case BPF_ADD: a += src; break;
      case BPF_SUB: a -= src; break;
      case BPF_MUL: a *= src; break;
      case BPF_DIV:
        if (!src) return 0;
        a /= src;
        break;
      case BPF_MOD:
        if (!src) return 0;
        a %= src;
        break;
      case BPF_OR: a |= src; break;
      case BPF_AND: a &= src; break;
      case BPF_XOR: a ^= src; break;
      case BPF_LSH: a = src < 32 ? a << src : 0; break;
      case BPF_RSH: a = src < 32 ? a >> src : 0; break;
      case BPF_NEG: a = -a; break;
      default: return 0;
      }
      break;
    case BPF_JMP: {
      /* The kernel accepts forward jumps only: the walk ends. */
      if (BPF_OP(f->code) == BPF_JA) {
        pc += k;
        break;
      }
      int taken;
      switch (BPF_OP(f->code)) {
      case BPF_JEQ: taken = a == src; break;
      case BPF_JGT: taken = a > src; break;
      case BPF_JGE: taken = a >= src; break;
      case BPF_JSET: taken = (a & src) != 0; break;
      default: return 0;
      }
      pc += taken ? f->jt : f->jf;
      break;
    }
    case BPF_RET:
      if (BPF_RVAL(f->code) == BPF_K) *ret = k;
      else if (BPF_RVAL(f->code) == BPF_A) *ret = a;
      else return 0;
      return 1;
    case BPF_MISC:
      if (BPF_MISCOP(f->code) == BPF_TAX) x = a;
      else if (BPF_MISCOP(f->code) == BPF_TXA) a = x;
      else return 0;
      break;
    default:
      return 0;
    }
  }
  return 0; /* fell off the end: the kernel would have refused the program */
}

int ur_seccomp_run(const struct sock_filter *prog, size_t n, uint32_t nr, uint32_t arch,
                   const uint64_t args[UR_SECCOMP_ARGS_KNOWN], uint32_t *ret) {
  return run_known(prog, n, nr, arch, args, (1u << UR_SECCOMP_ARGS_KNOWN) - 1, ret);
}

static int harmless(uint32_t ret, bool errno_ok) {
  uint32_t action = ret & SECCOMP_RET_ACTION_FULL;
  return action == SECCOMP_RET_ALLOW || action == SECCOMP_RET_LOG ||
         (errno_ok && action == SECCOMP_RET_ERRNO);
}

int ur_seccomp_allows(pid_t tid, uint32_t nr, const uint64_t args[UR_SECCOMP_ARGS_KNOWN]) {
  return ur_seccomp_allows_known(tid, nr, args, (1u << UR_SECCOMP_ARGS_KNOWN) - 1, true);
}

int ur_seccomp_allows_known(pid_t tid, uint32_t nr, const uint64_t args[UR_SECCOMP_ARGS_KNOWN],
                            unsigned known, bool errno_ok) {
#ifndef UR_AUDIT_ARCH
  (void)tid, (void)nr, (void)args, (void)known, (void)errno_ok;
  return -ENOSYS;
#else
  struct sock_filter *prog = malloc(MAX_INSNS * sizeof(*prog));
  if (!prog) return -ENOMEM;
  int rc = 1;
  for (unsigned long i = 0; rc == 1; i++) {
    long n = ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)i, NULL);
    if (n < 0) {
      /* ENOENT: past the last filter; EINVAL at the first: none at all. */
      rc = errno == ENOENT || (errno == EINVAL && i == 0) ? 1 : -errno;
      break;
    }
    if (n == 0 || n > MAX_INSNS || ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)i, prog) != n) {
      rc = n > MAX_INSNS ? 0 : -EIO;
      break;
    }
    uint32_t ret;
    if (!run_known(prog, (size_t)n, nr, UR_AUDIT_ARCH, args, known, &ret) ||
        !harmless(ret, errno_ok))
      rc = 0;
  }
  free(prog);
  return rc;
#endif
}
