/* Records SIGUSR1 on stdout when it is delivered; holds a big heap so that a
 * scan in "stopped" mode keeps it paused long enough to send the signal. */
#include <signal.h>

#include "scenario.h"

static volatile sig_atomic_t got;
static void on_usr1(int s) { (void)s; got = 1; }

int main(void) {
  signal(SIGUSR1, on_usr1);
  void **keep = malloc(sizeof(void *) * 400000);
  for (int i = 0; i < 400000; i++) keep[i] = malloc(64);
  ready("leak_count=0 leak_bytes=0");
  while (!got) pause();
  dprintf(1, "SIGUSR1\n");
  wait_for_test();
  KEEP(keep);
  return 0;
}
