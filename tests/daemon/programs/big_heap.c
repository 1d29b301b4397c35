/* A heap big enough that a scan in "stopped" mode holds the target paused
 * for a while (so a test can cancel mid-scan), and a SIGUSR1 handler that
 * reports on stdout: proof that the target runs again afterwards. Nothing
 * leaks. argv[1]: number of blocks (default 400000). */
#include <signal.h>

#include "../../scan/programs/scenario.h"


static volatile sig_atomic_t got;
static void on_usr1(int s) {
  (void)s;
  got = 1;
}

int main(int argc, char **argv) {
  int blocks = argc > 1 ? atoi(argv[1]) : 400000;
  signal(SIGUSR1, on_usr1);
  void **keep = malloc(sizeof(void *) * (size_t)blocks);
  for (int i = 0; i < blocks; i++) keep[i] = malloc(64);
  wipe();
  ready("leak_count=0 leak_bytes=0");
  for (;;) {
    while (!got) pause();
    got = 0;
    dprintf(1, "SIGUSR1\n");
    KEEP(keep);
    if (0) wait_for_test();
  }
  return 0;
}
