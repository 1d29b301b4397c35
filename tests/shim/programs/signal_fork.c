/* fork() from a SIGALRM handler at a high rate while the single-threaded
 * program itself forks, mallocs and frees: glibc's tst-mallocfork2 in a
 * tighter loop, so the handler's fork lands inside the shim's own fork
 * handlers (prepare, parent, child) often. glibc's fork is
 * async-signal-safe while the process has one thread.
 * argv[1]: rounds of the main loop. argv[2] "stdio": each round opens and
 * closes a FILE instead of forking (fclose holds stdio's list lock, which
 * a fork's handlers may take). Prints OK, or exits 1 on a failed fork or
 * child. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t failed;

static void reap(pid_t pid) {
  int status;
  pid_t r;
  while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (r != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
}

static void on_alarm(int sig) {
  (void)sig;
  int saved = errno;
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid < 0) failed = 1;
  else reap(pid);
  errno = saved;
}

int main(int argc, char **argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 2000;
  int stdio = argc > 2 && strcmp(argv[2], "stdio") == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  /* Often enough to land in every part of a fork, rarely enough that the
   * main loop still runs between two of them (each handler forks too). */
  struct itimerval it = {{0, 700}, {0, 700}};
  setitimer(ITIMER_REAL, &it, NULL);
  void *ring[64] = {0};
  for (long i = 0; i < rounds && !failed; i++) {
    if (stdio) {
      FILE *f = fopen("/dev/null", "r");
      if (f) fclose(f);
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid < 0) {
      failed = 1;
      break;
    }
    for (int k = 0; k < 64; k++) {
      free(ring[k]);
      ring[k] = malloc((size_t)(i * 64 + k) % 3000 + 1);
    }
    reap(pid);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  for (int k = 0; k < 64; k++) free(ring[k]);
  if (failed) {
    fprintf(stderr, "a fork or its child failed\n");
    return 1;
  }
  printf("OK\n");
  return 0;
}
