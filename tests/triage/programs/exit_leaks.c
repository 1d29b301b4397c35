/* A short-lived program for the leak check at exit. MODE (argv[1]):
 *   clean    no leak; prints "out" without a newline (to stdout, buffered)
 *   leak     leaks 64 bytes from leak_here, prints "out" without a newline,
 *            then exits with status 7
 *   dropped  two blocks reachable from globals until exit: an atexit handler
 *            drops the 40-byte one, a destructor of the program the 24-byte
 *            one; they leak only if the check runs after both
 *   fork     a child leaks (leak_here) and exits 0; prints "child=STATUS"
 *   exec     execs this program as "leak"
 *   closed   leaks like "leak"; an atexit handler closes stderr, as
 *            coreutils' close_stdout does
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../scan/programs/scenario.h"

void *volatile g_atexit_block, *volatile g_dtor_block;

__attribute__((noinline)) static void leak_here(void) {
  void *volatile p = malloc(64);
  memset((void *)p, 'L', 64);
  p = NULL;
}

__attribute__((noinline)) static void keep_in_globals(void) {
  g_atexit_block = malloc(40);
  g_dtor_block = malloc(24);
}

static void close_stderr(void) { fclose(stderr); }

static void drop_at_exit(void) { g_atexit_block = NULL; }

__attribute__((destructor)) static void drop_in_destructor(void) { g_dtor_block = NULL; }

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "clean";
  if (strcmp(mode, "clean") == 0) {
    void *p = malloc(10);
    free(p);
    fputs("out", stdout); /* flushed by exit, after the check */
    return 0;
  }
  if (strcmp(mode, "leak") == 0) {
    leak_here();
    wipe();
    fputs("out", stdout);
    return 7;
  }
  if (strcmp(mode, "closed") == 0) {
    atexit(close_stderr);
    leak_here();
    wipe();
    return 0;
  }
  if (strcmp(mode, "dropped") == 0) {
    keep_in_globals();
    atexit(drop_at_exit);
    wipe();
    return 0;
  }
  if (strcmp(mode, "fork") == 0) {
    pid_t child = fork();
    if (child == 0) {
      leak_here();
      wipe();
      exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
  }
  if (strcmp(mode, "exec") == 0) {
    execl("/proc/self/exe", argv[0], "leak", (char *)NULL);
    return 99;
  }
  return 98;
}
