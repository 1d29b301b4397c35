/* A target for the injected fork of a scan without the shim
 * (unreachable/scan/glibc_fork.py): its main thread, the one the clone is
 * injected into, sits in a restartable system call chosen by argv[1]:
 *   read       read() on a pipe (ERESTARTSYS), the data written on "write"
 *   nanosleep  a 12-second nanosleep (ERESTART_RESTARTBLOCK): longer than the
 *              test's scans take on a loaded machine
 *   futex      FUTEX_WAIT with no timeout (ERESTARTSYS), woken on "wake"
 *   errno-clone, kill-wait4  as read, under a seccomp filter that makes
 *              clone fail with EPERM, or kills on wait4
 * then prints "RESULT ..." with what the call returned. A SIGCHLD handler
 * (no SA_RESTART) counts what it gets; "status" prints that count and what
 * waitpid(-1, WNOHANG) says. Three 100-byte blocks leak. */
#include <errno.h>
#include <stdarg.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../support/c/seccomp_filter.h"

static volatile sig_atomic_t sigchld;
static int fds[2];
static uint32_t word;

static void on_sigchld(int sig) {
  (void)sig;
  sigchld++;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  line[n++] = '\n';
  if (write(1, line, (size_t)n) < 0) _exit(99);
}

static void *control(void *arg) {
  (void)arg;
  char line[64];
  size_t n = 0;
  char c;
  while (read(0, &c, 1) == 1) {
    if (c != '\n') {
      if (n + 1 < sizeof(line)) line[n++] = c;
      continue;
    }
    line[n] = 0;
    n = 0;
    if (strcmp(line, "write") == 0) {
      if (write(fds[1], "hello", 5) != 5) _exit(98);
    } else if (strcmp(line, "wake") == 0) {
      __atomic_store_n(&word, 1, __ATOMIC_SEQ_CST);
      syscall(SYS_futex, &word, FUTEX_WAKE, 1, NULL, NULL, 0);
    } else if (strcmp(line, "status") == 0) {
      errno = 0;
      pid_t w = waitpid(-1, NULL, WNOHANG);
      say("STATUS sigchld=%d wait=%d errno=%d", (int)sigchld, (int)w, errno);
    }
  }
  _exit(0);
}

static __attribute__((noinline)) void leak(void) {
  for (int i = 0; i < 3; i++) {
    void *volatile p = malloc(100);
    memset(p, 1, 100);
    p = NULL;
  }
}

static int filter(int nr, uint32_t action) {
  return refuse_call(nr, action, FILTER_SYSCALL, SECCOMP_FILTER_FLAG_TSYNC);
}

int main(int argc, char **argv) {
  const char *how = argc > 1 ? argv[1] : "read";
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigchld; /* no SA_RESTART: a SIGCHLD would end the calls with EINTR */
  sigaction(SIGCHLD, &sa, NULL);
  if (pipe(fds) != 0) return 1;
  leak();
  pthread_t t;
  if (pthread_create(&t, NULL, control, NULL) != 0) return 1;
  if (strcmp(how, "errno-clone") == 0 && filter(SYS_clone, SECCOMP_RET_ERRNO | EPERM)) return 1;
  if (strcmp(how, "kill-wait4") == 0 && filter(SYS_wait4, SECCOMP_RET_KILL_PROCESS)) return 1;
  say("READY leak_count=3");
  if (strcmp(how, "nanosleep") == 0) {
    struct timespec a, b, req = {12, 0}, rem = {0, 0};
    clock_gettime(CLOCK_MONOTONIC, &a);
    int r = nanosleep(&req, &rem);
    int e = r ? errno : 0;
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    say("RESULT r=%d errno=%d elapsed_ms=%ld", r, e, ms);
  } else if (strcmp(how, "futex") == 0) {
    long r = syscall(SYS_futex, &word, FUTEX_WAIT, 0, NULL, NULL, 0);
    int e = r ? errno : 0;
    say("RESULT r=%ld errno=%d word=%u", r, e, word);
  } else {
    char buf[8] = {0};
    ssize_t n = read(fds[0], buf, 5);
    int e = n < 0 ? errno : 0;
    say("RESULT r=%zd errno=%d data=%s", n, e, buf);
  }
  for (;;) pause();
}
