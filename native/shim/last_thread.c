#include "last_thread.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kept_file.h"
#include "state.h"

/* The process's stat, opened as the helper starts and in a forked child
 * (kept_file.h): sshd's preauth child chroots into an empty directory as
 * soon as it is forked, and it is there that its filter kills its thread. */
static struct ur_kept_file g_stat = UR_KEPT_FILE_NONE;

void ur_last_thread_keep(void) { ur_kept_file_open(&g_stat, "/proc/self/stat"); }

void ur_last_thread_after_fork_child(void) {
  ur_kept_file_drop(&g_stat); /* the parent's */
  ur_last_thread_keep();
}

/* From /proc/self/stat (proc(5) fields 3, 20 and 52), which are the
 * leader's state and exit_code, and the threads not yet released, the
 * exited leader counted. -1: unreadable. */
static int self_stat(char *state, long *threads, long *exit_code) {
  int kept = ur_kept_file_fd(&g_stat), fd = kept;
  if (fd < 0 && (fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC)) < 0) return -1;
  char buf[1024];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0); /* a seq_file read at 0 starts again */
  if (fd != kept) close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the command may hold anything */
  if (!p || p[1] != ' ' || !p[2]) return -1;
  *state = p[2];
  *threads = *exit_code = -1;
  int field = 3;
  for (const char *q = p + 2; *q && field < 52; q++) {
    if (*q != ' ') continue;
    if (++field == 20) *threads = strtol(q + 1, NULL, 10);
    if (field == 52) *exit_code = strtol(q + 1, NULL, 10);
  }
  return 0;
}

void ur_last_thread_check(void) {
  char state;
  long threads, code;
  /* Two: the exited leader, a zombie until the group ends, and this helper. */
  if (self_stat(&state, &threads, &code) != 0 || state != 'Z' || code < 0 || threads != 2) return;
  pid_t pid = getpid(), self = (pid_t)syscall(SYS_gettid);
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
