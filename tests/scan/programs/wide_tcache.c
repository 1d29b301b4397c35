/* A thread whose tcache is a chunk 16 bytes larger than its struct needs,
 * as syslog-ng's worker threads had: glibc hands out a free chunk whole
 * when what would be left of it is too small to be a chunk. One arena
 * (M_ARENA_MAX 1), so the thread's first malloc takes its tcache from the
 * main arena, where the only free chunk that fits is one of 0x2a0 bytes
 * (its bin's tcache filled first, so that it is binned). The thread is
 * started first and held before its first malloc: starting it mallocs (its
 * DTV), which would split that chunk. Run without the shim. One 500-byte
 * block leaks. */
#include <malloc.h>
#include <pthread.h>

#include "../../scan/programs/scenario.h"

#define WIDE (0x2a0 - 16)
/* volatile: a malloc whose block is freed unused may be compiled away */
static void *volatile g_fill[7], *volatile g_wide, *volatile g_guard[8], *volatile g_thread_block;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_go, g_started;

static void *worker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_lock);
  while (!g_go) pthread_cond_wait(&g_cond, &g_lock);
  pthread_mutex_unlock(&g_lock);
  g_thread_block = malloc(40); /* its tcache first, then this */
  pthread_mutex_lock(&g_lock);
  g_started = 1;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_lock);
  for (;;) pause();
  return NULL;
}

int main(void) {
  mallopt(M_ARENA_MAX, 1);
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
  for (int i = 0; i < 7; i++) {
    g_fill[i] = malloc(WIDE);
    g_guard[i] = malloc(16); /* no two free chunks side by side */
  }
  g_wide = malloc(WIDE);
  g_guard[7] = malloc(16);
  for (int i = 0; i < 7; i++) free(g_fill[i]); /* the tcache bin is full */
  free(g_wide);                                 /* so this one is binned */
  pthread_mutex_lock(&g_lock);
  g_go = 1;
  pthread_cond_broadcast(&g_cond);
  while (!g_started) pthread_cond_wait(&g_cond, &g_lock);
  pthread_mutex_unlock(&g_lock);
  KEEP(malloc(500));
  wipe();
  ready("leak_count=1 leak_bytes=504");
  wait_for_test();
  return 0;
}
