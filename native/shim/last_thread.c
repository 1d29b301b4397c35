#include "last_thread.h"

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "state.h"

/* A thread's state letter and exit_code (proc(5) stat fields 3 and 52).
 * -1: unreadable (the thread reaped meanwhile). */
static int task_stat(pid_t tid, char *state, long *exit_code) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the command may hold anything */
  if (!p || p[1] != ' ' || !p[2]) return -1;
  *state = p[2];
  *exit_code = -1;
  int field = 3;
  for (const char *q = p + 2; *q; q++)
    if (*q == ' ' && ++field == 52) {
      *exit_code = strtol(q + 1, NULL, 10);
      break;
    }
  return 0;
}

/* Whether a thread other than the helper still runs: read from the
 * directory with getdents64, which needs no allocation. */
static int other_thread_runs(pid_t self) {
  int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 1;
  char buf[4096];
  long n;
  int runs = 0;
  while (!runs && (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
    for (long off = 0; off < n && !runs;) {
      const char *name = buf + off + 19; /* struct linux_dirent64's d_name */
      off += *(const uint16_t *)(const void *)(buf + off + 16);
      pid_t tid = (pid_t)atoi(name);
      char state;
      long code;
      if (tid <= 0 || tid == self || task_stat(tid, &state, &code) != 0) continue;
      runs = state != 'Z' && state != 'X';
    }
  close(fd);
  return runs || n < 0;
}

void ur_last_thread_check(void) {
  pid_t pid = getpid(), self = (pid_t)syscall(SYS_gettid);
  char state;
  long code;
  if (task_stat(pid, &state, &code) != 0 || state != 'Z' || code < 0) return;
  if (other_thread_runs(self)) return;
  int sig = (int)(code & 0x7f);
  if (sig) {
    /* The default action, whatever the program's handler: the kernel's own
     * end of a last thread (force_sig_seccomp) overrides it too. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(sig, &dfl, NULL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    syscall(SYS_tgkill, pid, self, sig);
  }
  if (code == 0) {
    /* glibc's end of the last thread it knows of (main's pthread_exit;
     * the helper is one to glibc): exit(0), with the atexit handlers and
     * the stdio flush, run here as the program's own thread would. */
    ur_tls.busy = 0;
    exit(0);
  }
  syscall(SYS_exit_group, (int)(code >> 8 & 0xff));
}
