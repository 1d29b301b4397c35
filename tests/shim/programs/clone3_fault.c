/* clone3 through syscall() with an argument the kernel cannot read: it
 * fails with EFAULT, and the shim, which reads the argument to tell a fork
 * from a thread, must let it (no SIGSEGV in the shim). Two such arguments:
 * address 1, and a struct whose first 8 bytes end a readable page and
 * whose rest lies on an unreadable one. Prints "EFAULT EFAULT" and exits 0;
 * anything else exits 1. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

#define CLONE_ARGS_SIZE 88 /* struct clone_args up to cgroup (Linux 5.7) */

static const char *outcome(void *args) {
  errno = 0;
  long r = syscall(SYS_clone3, args, (size_t)CLONE_ARGS_SIZE);
  if (r == 0) _exit(0); /* a child: the call was not refused */
  return r == -1 && errno == EFAULT ? "EFAULT" : strerror(errno);
}

int main(void) {
  long page = sysconf(_SC_PAGESIZE);
  char *two = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (two == MAP_FAILED || mprotect(two + page, (size_t)page, PROT_NONE) != 0) return 2;
  const char *first = outcome((void *)1);
  const char *second = outcome(two + page - 8); /* flags readable (zero), the rest not */
  printf("%s %s\n", first, second);
  return strcmp(first, "EFAULT") == 0 && strcmp(second, "EFAULT") == 0 ? 0 : 1;
}
