/* The main thread calls pthread_exit while the others run on: the kernel
 * shows the process as a zombie (its leader, State Z) although it is alive.
 * A worker keeps one block in a global and drops another; the READY line
 * comes once the leader is a zombie. */
#include <pthread.h>

#include "scenario.h"

#define WORKERS 8

void *g_kept;
static pthread_t g_main;

static int leader_is_zombie(void) {
  char buf[512];
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *paren = strrchr(buf, ')');
  return paren && paren[1] == ' ' && paren[2] == 'Z';
}

static void *idle(void *arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}

static void *worker(void *arg) {
  (void)arg;
  pthread_join(g_main, NULL);
  while (!leader_is_zombie()) usleep(1000);
  g_kept = malloc(100);
  KEEP(malloc(777));
  wipe();
  ready("leak_count=1 leak_bytes=777");
  wait_for_test();
  exit(0);
}

int main(void) {
  g_main = pthread_self();
  pthread_t t;
  for (int i = 0; i < WORKERS - 1; i++) pthread_create(&t, NULL, idle, NULL);
  pthread_create(&t, NULL, worker, NULL);
  pthread_exit(NULL);
}
