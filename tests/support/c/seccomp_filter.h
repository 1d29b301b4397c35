/* Seccomp filters for the test programs, installed either way a program
 * can: prctl(PR_SET_SECCOMP), or the seccomp() system call through
 * syscall() (glibc has no wrapper; libseccomp calls it so). Included by a
 * path relative to the program. */
#ifndef UR_TESTS_SECCOMP_FILTER_H
#define UR_TESTS_SECCOMP_FILTER_H

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

enum filter_route { FILTER_PRCTL, FILTER_SYSCALL };

/* flags: the seccomp() call's (SECCOMP_FILTER_FLAG_TSYNC), FILTER_SYSCALL only. */
static inline int install_filter(struct sock_fprog *prog, enum filter_route route,
                                 unsigned flags) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  if (route == FILTER_PRCTL) return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog);
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, prog);
}

#define FILTER_CALLS_MAX 48

/* The call number loaded, and `matched` answered to each of the n calls
 * in nrs (the rest fall through past them). The instructions written. */
static inline unsigned put_matches(struct sock_filter *f, const int *nrs, unsigned n,
                                   uint32_t matched) {
  unsigned len = 0;
  f[len++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, nr));
  for (unsigned i = 0; i < n; i++) {
    f[len++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nrs[i], 0, 1);
    f[len++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, matched);
  }
  return len;
}

/* A filter that answers `matched` to the n system calls in nrs and
 * `otherwise` to every other one. 0, or -1 with errno. */
static inline int filter_calls(const int *nrs, unsigned n, uint32_t matched, uint32_t otherwise,
                               enum filter_route route, unsigned flags) {
  struct sock_filter f[2 + 2 * FILTER_CALLS_MAX];
  if (n > FILTER_CALLS_MAX) return -1;
  unsigned len = put_matches(f, nrs, n, matched);
  f[len++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, otherwise);
  struct sock_fprog prog = {.len = (unsigned short)len, .filter = f};
  return install_filter(&prog, route, flags);
}

#define REFUSE_MAX 8

/* A filter that answers `action` to the n system calls in nrs and allows
 * every other one. 0, or -1 with errno. */
static inline int refuse_calls(const int *nrs, unsigned n, uint32_t action,
                               enum filter_route route, unsigned flags) {
  if (n > REFUSE_MAX) return -1;
  return filter_calls(nrs, n, action, SECCOMP_RET_ALLOW, route, flags);
}

/* A filter that allows the n system calls in nrs and answers `action` to
 * every other one (an allowlist, as Chrome's and OpenSSH's sandboxes are).
 * 0, or -1 with errno. */
static inline int allow_only(const int *nrs, unsigned n, uint32_t action,
                             enum filter_route route, unsigned flags) {
  return filter_calls(nrs, n, SECCOMP_RET_ALLOW, action, route, flags);
}

/* An allowlist (allow_only) that grants the call `limited` too, but only
 * when its third argument is `value` (vsftpd's grants mprotect so, with
 * PROT_READ alone). 0, or -1 with errno. */
static inline int allow_only_with_arg(const int *nrs, unsigned n, int limited, uint32_t value,
                                      uint32_t action, enum filter_route route, unsigned flags) {
  struct sock_filter f[6 + 2 * FILTER_CALLS_MAX];
  if (n > FILTER_CALLS_MAX) return -1;
  unsigned len = put_matches(f, nrs, n, SECCOMP_RET_ALLOW);
  /* Not `limited`: on to the last instruction, the refusal. */
  f[len++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)limited, 0, 3);
  /* The argument's low word (little-endian x86-64). */
  f[len++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, args[2]));
  f[len++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1);
  f[len++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  f[len++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, action);
  struct sock_fprog prog = {.len = (unsigned short)len, .filter = f};
  return install_filter(&prog, route, flags);
}

static inline int refuse_call(int nr, uint32_t action, enum filter_route route, unsigned flags) {
  return refuse_calls(&nr, 1, action, route, flags);
}

#endif
