/*
 * ur_seccomp_run (native/scanner/seccomp_check.c) against programs whose
 * verdict is worked out by hand, one per opcode family, plus the loads it must
 * refuse to guess (the instruction pointer, the sixth argument). Built under
 * ASan+UBSan by tests/scanner/test_seccomp_c.py. Exit 0 = pass.
 */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "seccomp_check.h"

#define NR offsetof(struct seccomp_data, nr)
#define ARCH offsetof(struct seccomp_data, arch)
#define IP offsetof(struct seccomp_data, instruction_pointer)
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#define ARG_HI(i) (ARG_LO(i) + 4)
#define LEN(p) (sizeof(p) / sizeof(*(p)))

static int failures;

/* want_known 0: the run must refuse to decide. */
static void expect(const char *name, const struct sock_filter *p, size_t n, int want_known,
                   uint32_t want) {
  const uint64_t args[UR_SECCOMP_ARGS_KNOWN] = {0x1122334455667788ull, 7, 0, 0, 0};
  uint32_t ret = 0xdeadbeef;
  int known = ur_seccomp_run(p, n, 56, AUDIT_ARCH_X86_64, args, &ret);
  if (known != want_known || (known && ret != want)) {
    printf("FAIL %s: known=%d ret=%#x, want known=%d ret=%#x\n", name, known, ret, want_known,
           want);
    failures++;
  }
}

int main(void) {
  const struct sock_filter arch_nr[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARCH),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 56, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  expect("arch_nr", arch_nr, LEN(arch_nr), 1, SECCOMP_RET_ERRNO | 1);

  /* Both halves of a 64-bit argument, little endian. */
  const struct sock_filter halves[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_HI(0)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x11223344, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0)),
      BPF_STMT(BPF_RET | BPF_A, 0),
  };
  expect("halves", halves, LEN(halves), 1, 0x55667788);

  /* JSET, JGT, JGE with K and X. */
  const struct sock_filter jumps[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1)),           /* A = 7 */
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 8, 5, 0),           /* 7 & 8 = 0: on */
      BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 6, 0, 4),            /* 7 > 6: on */
      BPF_STMT(BPF_LDX | BPF_W | BPF_IMM, 7),                  /* X = 7 */
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_X, 0, 0, 2),            /* 7 >= 7: on */
      BPF_JUMP(BPF_JMP | BPF_JGT | BPF_X, 0, 1, 0),            /* 7 > 7: no */
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_LOG),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_THREAD),
  };
  expect("jumps", jumps, LEN(jumps), 1, SECCOMP_RET_LOG);

  /* ALU with K and X, scratch memory, TAX/TXA, JA. */
  const struct sock_filter alu[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_IMM, 6),
      BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, 7),  /* 42 */
      BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 8),  /* 50 */
      BPF_STMT(BPF_ALU | BPF_SUB | BPF_K, 2),  /* 48 */
      BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, 5),  /* 9 */
      BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, 5),  /* 4 */
      BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 4),  /* 64 */
      BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 1),  /* 32 */
      BPF_STMT(BPF_ALU | BPF_OR | BPF_K, 3),   /* 35 */
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 33), /* 33 */
      BPF_STMT(BPF_ALU | BPF_XOR | BPF_K, 1),  /* 32 */
      BPF_STMT(BPF_ST, 3),
      BPF_STMT(BPF_MISC | BPF_TAX, 0),         /* X = 32 */
      BPF_STMT(BPF_ALU | BPF_NEG, 0),          /* -32 */
      BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0),  /* 0 */
      BPF_STMT(BPF_LDX | BPF_W | BPF_MEM, 3),  /* X = 32 */
      BPF_STMT(BPF_MISC | BPF_TXA, 0),         /* A = 32 */
      BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),   /* A = 64 */
      BPF_STMT(BPF_ALU | BPF_SUB | BPF_X, 0),  /* 32 */
      BPF_STMT(BPF_JMP | BPF_JA, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_ALU | BPF_OR | BPF_K, SECCOMP_RET_ERRNO),
      BPF_STMT(BPF_RET | BPF_A, 0),
  };
  expect("alu", alu, LEN(alu), 1, SECCOMP_RET_ERRNO | 32);

  /* What it must not guess. */
  const struct sock_filter ip[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, IP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  expect("ip", ip, LEN(ip), 0, 0);
  const struct sock_filter arg5[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(5)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  expect("arg5", arg5, LEN(arg5), 0, 0);
  const struct sock_filter div0[] = {
      BPF_STMT(BPF_LDX | BPF_W | BPF_IMM, 0),
      BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  expect("div0", div0, LEN(div0), 0, 0);
  const struct sock_filter unaligned[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  expect("unaligned", unaligned, LEN(unaligned), 0, 0);
  const struct sock_filter no_ret[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR),
  };
  expect("no_ret", no_ret, LEN(no_ret), 0, 0);

  if (failures) return 1;
  puts("ok");
  return 0;
}
