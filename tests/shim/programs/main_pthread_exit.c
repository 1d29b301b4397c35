/* main ends with pthread_exit: glibc ends the process with exit(0) once
 * the last thread it knows of has ended (the atexit handler runs). argv[1]
 * "thread": another thread outlives main a while and allocates. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void bye(void) {
  printf("atexit ran\n");
  fflush(stdout);
}

static void *late(void *arg) {
  (void)arg;
  usleep(300 * 1000);
  free(malloc(10));
  return NULL;
}

int main(int argc, char **argv) {
  atexit(bye);
  free(malloc(5));
  pthread_t t;
  if (argc > 1 && strcmp(argv[1], "thread") == 0 && pthread_create(&t, NULL, late, NULL) != 0)
    return 2;
  pthread_exit(NULL);
}
