/* The only pointer to one block sits in a general register (r12) of a spinning
 * thread, to another in a vector register (xmm15) of another spinning thread. */
#include <pthread.h>

#include "scenario.h"

static void *volatile g_handoff[2];
static volatile int g_ready;

__attribute__((noinline)) static void stash(int i, size_t n) {
  g_handoff[i] = malloc(n);
}

static void *gpr_thread(void *arg) {
  (void)arg;
  stash(0, 111);
  register void *r12 __asm__("r12") = g_handoff[0];
  g_handoff[0] = NULL;
  wipe();
  __sync_fetch_and_add(&g_ready, 1);
  for (;;) __asm__ volatile("pause" : "+r"(r12));
  return NULL;
}

static void *xmm_thread(void *arg) {
  (void)arg;
  stash(1, 222);
  wipe();
  __asm__ volatile("movq %0, %%xmm15" : : "r"(g_handoff[1]) : "xmm15");
  g_handoff[1] = NULL;
  __sync_fetch_and_add(&g_ready, 1);
  for (;;) __asm__ volatile("pause" ::: "memory");
  return NULL;
}

__attribute__((noinline)) static void drop(void) { KEEP(malloc(33)); }

int main(void) {
  pthread_t a, b;
  pthread_create(&a, NULL, gpr_thread, NULL);
  pthread_create(&b, NULL, xmm_thread, NULL);
  while (g_ready < 2) usleep(1000);
  drop();
  wipe();
  ready("leak_count=1 leak_bytes=33");
  wait_for_test();
  return 0;
}
