/* A glibc-style test (the parity driver, test-skeleton.c) whose forked
 * child hangs, for the parity harness's timeout: the child moves to a
 * process group of its own, as glibc's own driver puts its test in one,
 * forks a grandchild that hangs too, and the test waits for the child
 * forever. Each prints its pid ("child N", "grandchild N") so that the
 * caller can check that none is left once the run is over. */
#include <signal.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int do_test(void) {
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    setpgid(0, 0);
    pid_t grandchild = fork();
    if (grandchild == 0)
      for (;;) pause();
    printf("grandchild %d\n", (int)grandchild);
    for (;;) pause();
  }
  printf("child %d\n", (int)child);
  waitpid(child, NULL, 0);
  return 0;
}

#define TEST_FUNCTION do_test()
#define TIMEOUT 1
#include "test-skeleton.c"
