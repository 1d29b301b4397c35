/*
 * The helper thread must not outlive the program's threads. A thread that
 * ends without glibc knowing (killed by its seccomp filter's
 * SECCOMP_RET_KILL_THREAD, or by a raw SYS_exit) ends a process of one
 * thread, and the kernel reports the process ended as that thread did;
 * with the helper left, the process stayed, its leader a zombie, every
 * signal but SIGKILL left pending (the helper blocks them), and its parent
 * waited for ever (sshd's monitor for its preauth child).
 *
 * The leader's state and exit code, and the threads left, are read from
 * /proc/self/stat, kept open from the helper's start and from a fork (a
 * chroot without /proc comes later): where it could not be opened then,
 * nothing is done.
 */
#ifndef UR_LAST_THREAD_H
#define UR_LAST_THREAD_H

/* From the helper's loop: when the thread group's leader has exited and no
 * thread but the helper is left, end the process as the leader's end would
 * have: by its signal (its default action), or with its exit status. */
void ur_last_thread_check(void);

/* Opens /proc/self/stat to keep; called as a helper starts, by the thread
 * starting it. */
void ur_last_thread_keep(void);
/* In a forked child: the parent's closed, the child's own opened. */
void ur_last_thread_after_fork_child(void);

#endif
