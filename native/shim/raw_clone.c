/*
 * A process made by a program's raw clone() without CLONE_VM
 * (syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWIPC | SIGCHLD) is vsftpd's,
 * SYS_clone3 the same) is a fork to the kernel, but glibc's fork() never
 * ran, nor the shim's fork handlers: the child kept the parent's descriptor
 * (its pid, its helper's tid), so no scanner took it for a process of its
 * own, and any lock of the shim's another thread held at the clone stayed
 * held in it for good. The shim's syscall() (sandbox.c) hands such a call
 * here, and the fork handlers run around it as around fork(): every lock
 * taken before the call and given back on both sides, the child set up as
 * a forked child is. With one difference: the child never gets a helper
 * thread. glibc, never told of the fork, still lists the parent's threads
 * there (the helper's among them, on the stack a new helper would take),
 * and a thread started there corrupts that list (set*id() then spins
 * over it). So the child is swept stopped (helper.c). Its own fork(),
 * through glibc, gives its child a helper again.
 *
 * Left to the kernel as they were: a clone that shares memory (a thread,
 * vfork's CLONE_VM | CLONE_VFORK); CLONE_VFORK alone (the parent would wait
 * for the child's exec holding every lock of the shim's); a child given a
 * stack or a TLS of its own (it cannot return through this code); and
 * CLONE_FILES (the child's set-up closes files the parent keeps open).
 */
#include "raw_clone.h"

#include <errno.h>
#include <linux/sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "raw_syscall.h"

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

/* Flags whose child is not a copy of this thread alone, returning here. */
#define NOT_A_FORK                                                                      \
  ((uint64_t)(CLONE_VM | CLONE_THREAD | CLONE_SIGHAND | CLONE_VFORK | CLONE_SETTLS | \
              CLONE_FILES))

/* clone3's argument up to the fields read here (the kernel takes no less
 * than its first version, 64 bytes). */
struct clone3_head {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static void (*on_prepare)(void), (*on_parent)(void), (*on_child)(void);

void ur_raw_clone_handlers(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  on_parent = parent;
  on_child = child;
  __atomic_store_n(&on_prepare, prepare, __ATOMIC_RELEASE);
}

/* clone3's argument into *h: 1, or 0 when the kernel cannot read it either
 * (the call then fails there with EFAULT, as without the shim). Read by
 * process_vm_readv on the process's own pid, which never faults (and the
 * kernel always allows within one process). Under a seccomp filter that
 * call may be refused, or killed on, so there the argument is read
 * directly: a correct program's is readable, and only a wrong one's (which
 * the kernel would answer with EFAULT) crashes here instead. Read directly
 * too where the kernel has no process_vm_readv (ENOSYS). */
static int read_head(long a, int filtered, struct clone3_head *h) {
  const struct clone3_head *in = (const struct clone3_head *)(uintptr_t)a;
  if (!filtered) {
    struct iovec local = {h, sizeof *h}, remote = {(void *)(uintptr_t)a, sizeof *h};
    long n = ur_sys6(SYS_process_vm_readv, ur_sys6(SYS_getpid, 0, 0, 0, 0, 0, 0),
                     (long)(uintptr_t)&local, 1, (long)(uintptr_t)&remote, 1, 0);
    if (n == (long)sizeof *h) return 1;
    if (n >= 0 || n == -EFAULT) return 0; /* a part or none readable */
  }
  *h = *in;
  return 1;
}

int ur_raw_clone_forks(long nr, long a, long b, int filtered) {
  if (nr == SYS_clone) return !((uint64_t)a & NOT_A_FORK) && b == 0;
  /* Read here only once it is at least the size the kernel reads. */
  struct clone3_head h;
  if (nr != SYS_clone3 || (unsigned long)b < sizeof h || !read_head(a, filtered, &h)) return 0;
  return !(h.flags & NOT_A_FORK) && h.stack == 0;
}

long ur_raw_clone_fork(long nr, long a, long b, long c, long d, long e, long f) {
  void (*prepare)(void) = __atomic_load_n(&on_prepare, __ATOMIC_ACQUIRE);
  if (!prepare) return ur_sys6(nr, a, b, c, d, e, f);
  int saved = errno;
  prepare();
  long r = ur_sys6(nr, a, b, c, d, e, f);
  if (r == 0) on_child();
  else on_parent();
  errno = saved;
  return r;
}
