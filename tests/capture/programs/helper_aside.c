/* Makes the shim's helper step aside on command ("aside": a setns() into
 * its own mount namespace); a new helper starts as the call returns. Holds
 * one leak. */
#include <fcntl.h>
#include <sched.h>

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
  }
  return 0;
}
