#include "helper.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim.h"

static void snapshot(void) {
  /* Raw clone, not fork(): fork runs atfork handlers and takes malloc locks
   * that stopped threads may hold. Exit signal 0, no CLONE_VM: a frozen
   * copy-on-write image. The scanner traces us with PTRACE_O_TRACECLONE, so
   * the child stops before it runs; untraced, it just exits. */
  long pid = syscall(SYS_clone, 0, 0, NULL, NULL, 0);
  if (pid == 0) syscall(SYS_exit_group, 0);
  if (pid > 0) {
    while (wait4((pid_t)pid, NULL, __WALL, NULL) < 0 && errno == EINTR) {
    }
  }
}

static void *helper_main(void *arg) {
  (void)arg;
  prctl(PR_SET_NAME, "ur-helper", 0, 0, 0);
  uint32_t *cmd = ur_g.helper_cmd;
  __atomic_store_n(&unreachable_descriptor.helper_tid, (uint32_t)syscall(SYS_gettid),
                   __ATOMIC_RELEASE);
  for (;;) {
    uint32_t c = __atomic_load_n(cmd, __ATOMIC_ACQUIRE);
    if (c == UR_CMD_IDLE) {
      /* A ptrace interrupt restarts this wait, which re-reads the word. */
      syscall(SYS_futex, cmd, FUTEX_WAIT_PRIVATE, UR_CMD_IDLE, NULL, NULL, 0);
      continue;
    }
    if (c == UR_CMD_SNAPSHOT) snapshot();
    __atomic_store_n(cmd, UR_CMD_IDLE, __ATOMIC_RELEASE);
  }
  return NULL;
}

void ur_helper_start(void) {
  if (!ur_g.helper_cmd) return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old); /* the helper inherits a full mask */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_t t;
  pthread_create(&t, &attr, helper_main, NULL);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void ur_helper_after_fork_child(void) {
  unreachable_descriptor.helper_tid = 0;
  if (ur_g.helper_cmd) *ur_g.helper_cmd = UR_CMD_IDLE;
  __atomic_fetch_or(&ur_g.slow, UR_SLOW_HELPER, __ATOMIC_RELEASE);
}
