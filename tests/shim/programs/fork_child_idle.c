/* A forked child that allocates (its first allocation starts its own
 * helper), then waits to be scanned: the parent's helper did not come
 * along, and nothing of it may show as a leak of the child's. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  void *volatile keep = malloc(64);
  pid_t pid = fork();
  if (pid == 0) {
    void *volatile again = malloc(100);
    printf("READY child=%d leak_count=0 leak_bytes=0\n", (int)getpid());
    fflush(stdout);
    pause();
    free(again);
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  free(keep);
  return 0;
}
