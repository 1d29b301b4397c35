/*
 * A thread under a seccomp filter the program installed (OpenSSH's preauth
 * child, a privilege-separated worker) may make only the system calls the
 * filter allows, and the shim's calls count as the program's. libunwind,
 * reaching a frame with no unwind information, checks each address it reads
 * with mincore() (and then a byte through its pipe): sshd's filter allows
 * neither, and kills the thread on the first (the preauth child killed, the
 * helper thread keeping the process alive, the login hung). Once the program
 * has installed a filter, libunwind's mincore() is answered "not mapped"
 * without the call: the backtrace ends at that frame, as at any address it
 * cannot read, and no pipe is written.
 *
 * Filters (and strict mode) installed through prctl(PR_SET_SECCOMP) are
 * seen here; a filter
 * inherited across exec, or set with the seccomp() system call through
 * syscall(), is not.
 */
#include <errno.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "state.h"

static int filtered;

UR_EXPORT int prctl(int option, ...) {
  va_list ap;
  va_start(ap, option);
  unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
  unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
  va_end(ap);
  /* Set before the call: once it returns, every call this thread makes is
   * the filter's to judge. */
  if (option == PR_SET_SECCOMP) __atomic_store_n(&filtered, 1, __ATOMIC_RELAXED);
  return (int)syscall(SYS_prctl, option, a2, a3, a4, a5);
}

UR_EXPORT int mincore(void *addr, size_t length, unsigned char *vec) {
  if (UR_UNLIKELY(ur_tls.unwinding && __atomic_load_n(&filtered, __ATOMIC_RELAXED))) {
    errno = ENOMEM;
    return -1;
  }
  return (int)syscall(SYS_mincore, addr, length, vec);
}
