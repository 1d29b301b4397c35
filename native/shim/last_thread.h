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
 * /proc/self: where it is missing (a chroot without /proc) nothing is done.
 */
#ifndef UR_LAST_THREAD_H
#define UR_LAST_THREAD_H

/* From the helper's loop: when the thread group's leader has exited and no
 * thread but the helper is left, end the process as the leader's end would
 * have: by its signal (its default action), or with its exit status. */
void ur_last_thread_check(void);

#endif
