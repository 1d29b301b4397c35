/*
 * Whether a target's seccomp filters let the shim's helper thread clone() its
 * snapshot. A filter that kills on clone would kill the target, so rather
 * than sweep every filtered target while stopped, the scanner (with
 * CAP_SYS_ADMIN) reads the helper's filters (PTRACE_SECCOMP_GET_FILTER, the
 * thread stopped by us) and runs them on the very call the helper makes.
 */
#ifndef UR_SECCOMP_CHECK_H
#define UR_SECCOMP_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The Seccomp: field of thread tid's /proc status (0 none, 1 strict, 2
 * filter), or -1 when it cannot be read. No filter means nothing to read
 * (reading one takes CAP_SYS_ADMIN); the scanner and the stopper ask it of
 * every thread they would inject a call into. */
int ur_seccomp_mode(pid_t pid, pid_t tid);

/* The helper's call: clone(0, 0, NULL, NULL, 0) (native/shim/helper.c). */
#define UR_SECCOMP_ARGS_KNOWN 5 /* the sixth register is whatever syscall() left there */

/* Run every filter of the stopped tracee `tid` on system call `nr` with the
 * first UR_SECCOMP_ARGS_KNOWN `args`. Returns 1 if each lets it through
 * (ALLOW, LOG, or ERRNO: the call fails cleanly), 0 if any would kill, trap,
 * trace, wait for a supervisor, or looks at what we cannot know (the
 * instruction pointer, the sixth argument), or -errno if the filters cannot
 * be read (EACCES without CAP_SYS_ADMIN). */
int ur_seccomp_allows(pid_t tid, uint32_t nr, const uint64_t args[UR_SECCOMP_ARGS_KNOWN]);

/* The same, with only the arguments whose bit is set in `known` knowable (a
 * filter that reads another makes the answer 0), and a filter's ERRNO taken
 * as harmless only with errno_ok: a call that must not fail (the injected
 * wait4 that reaps a snapshot child) needs ALLOW or LOG. */
int ur_seccomp_allows_known(pid_t tid, uint32_t nr, const uint64_t args[UR_SECCOMP_ARGS_KNOWN],
                            unsigned known, bool errno_ok);

/* One classic-BPF seccomp program run on a seccomp_data; 1 and *ret set, or
 * 0 when the program reads what we cannot know or does what seccomp refuses. */
struct sock_filter;
int ur_seccomp_run(const struct sock_filter *prog, size_t n, uint32_t nr, uint32_t arch,
                   const uint64_t args[UR_SECCOMP_ARGS_KNOWN], uint32_t *ret);

#endif
