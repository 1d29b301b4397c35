/* Makes the shim's helper step aside on command ("aside": a setns() into
 * its own mount namespace; a new helper starts as the call returns), or
 * forks a child that never allocates, so starts no helper of its own
 * ("fork": the child prints its pid). Holds one leak, which the child inherits. */
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>

#include "../../scan/programs/scenario.h"

int main(void) {
  int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  KEEP(malloc(24));
  wipe();
  ready("leak_count=1 leak_bytes=24");
  char cmd[16];
  ssize_t n;
  while ((n = read(0, cmd, sizeof cmd - 1)) > 0) {
    cmd[n] = 0;
    if (!strncmp(cmd, "aside", 5)) {
      int ok = setns(fd, CLONE_NEWNS) == 0;
      if (write(1, ok ? "DONE\n" : "FAILED\n", ok ? 5 : 7) < 0) return 1;
    }
    if (!strncmp(cmd, "fork", 4)) {
      /* The child prints its own pid: fork() returns there only after the
       * shim's child handler has cleared the parent's helper. */
      if (fork() == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char line[32];
        int len = snprintf(line, sizeof line, "%d\n", (int)getpid());
        if (write(1, line, (size_t)len) < 0) _exit(1);
        for (;;) pause();
      }
    }
  }
  return 0;
}
