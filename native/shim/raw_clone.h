/*
 * A program's own clone() without CLONE_VM, made through syscall() (vsftpd
 * makes its sessions so): a fork to the kernel that glibc's fork() and its
 * fork handlers never see. raw_clone.c runs the shim's handlers around it.
 */
#ifndef UR_RAW_CLONE_H
#define UR_RAW_CLONE_H

/* The handlers to run around such a call (shim.c's fork handlers, the
 * child's without a helper). Until they are set, the call is the kernel's. */
void ur_raw_clone_handlers(void (*prepare)(void), void (*parent)(void), void (*child)(void));

/* Whether syscall(nr, a, b, ...) makes such a child. filtered: the
 * process is under a seccomp filter (sandbox.h), so clone3's argument is
 * read without a system call (raw_clone.c read_head); an argument the
 * kernel cannot read is no fork (the call fails there with EFAULT). */
int ur_raw_clone_forks(long nr, long a, long b, int filtered);

/* The call, with the handlers around it; the kernel's return value. */
long ur_raw_clone_fork(long nr, long a, long b, long c, long d, long e, long f);

#endif
