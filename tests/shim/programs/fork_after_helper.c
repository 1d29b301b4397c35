/* A parent whose helper has run, and a child forked on "fork" that makes no
 * allocation (so no helper of its own starts): the child prints
 * "CHILD pid leak_count=N leak_bytes=B" (the parent's leaks are its too)
 * and waits. The parent's helper stack came along in the child, with no
 * thread on it. */
#include <signal.h>
#include <sys/wait.h>

#include "../../scan/programs/scenario.h"

#define LEAKS 4

int main(void) {
  for (int i = 0; i < LEAKS; i++) KEEP(malloc(200));
  wipe();
  ready("leak_count=%d leak_bytes=%d", LEAKS, LEAKS * 200);
  char c;
  if (read(0, &c, 1) <= 0) return 0;
  pid_t pid = fork();
  if (pid == 0) {
    char line[96];
    int n = snprintf(line, sizeof line, "CHILD %d\n", (int)getpid());
    if (write(1, line, (size_t)n) < 0) _exit(99);
    wait_for_test();
    _exit(0);
  }
  wait_for_test();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return 0;
}
