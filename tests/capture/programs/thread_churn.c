/* A server's shape: a thread per request, each holding a block while it
 * runs, all the time. Started with glibc's stack cache set to nothing, glibc
 * unmaps each thread's stack as it is joined: during any scan, 8 MiB stacks
 * released by the dozen, nearly all of each never touched, the rest the
 * exited thread's control block and frames, which it wrote on its way out
 * (saved) or which are no root. (A thread caught deep in a call, pages it
 * left unwritten on its way out, are a root lost: the scan is redone.)
 * Five blocks are leaked; no other. */
#include <pthread.h>
#include <unistd.h>

#include "../../scan/programs/scenario.h"

#define AT_ONCE 4

static void *request(void *arg) {
  (void)arg;
  void *volatile held = malloc(200);
  usleep(2000);
  free(held);
  return NULL;
}

static void *spawner(void *arg) {
  (void)arg;
  for (;;) {
    pthread_t t[AT_ONCE];
    for (int i = 0; i < AT_ONCE; i++) pthread_create(&t[i], NULL, request, NULL);
    for (int i = 0; i < AT_ONCE; i++) pthread_join(t[i], NULL);
  }
  return NULL;
}

int main(void) {
  drop_five_leaks();
  wipe();
  pthread_t s;
  pthread_create(&s, NULL, spawner, NULL);
  ready(FIVE_LEAKS);
  wait_for_test();
  return 0;
}
