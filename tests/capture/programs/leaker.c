/* Leaks all the time: a thread allocates a block and drops it, about every
 * 100 us, and notes when (CLOCK_MONOTONIC: the clock of Python's
 * time.monotonic()) just before the malloc and just after the drop. The
 * addresses are kept masked (not pointers), so every block is a leak. A
 * concurrent mark fixes its allocation set at its first stop: each block
 * dropped before that stop is reported, none allocated after it (the next
 * scan's). On a line on stdin, the thread stops and the notes are printed:
 * "ADDR BEFORE_NS AFTER_NS" per block, then "END". */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "../../scan/programs/scenario.h"

#define MAX_LEAKS (1u << 18)
#define MASK 0x5a5a5a5a5a5a5a5aull

static uint64_t g_addr[MAX_LEAKS], g_before[MAX_LEAKS], g_after[MAX_LEAKS];
static unsigned g_count;
static int g_stop;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void leak_one(unsigned i) {
  g_before[i] = now_ns();
  void *b = malloc(48 + (i % 7) * 16);
  KEEP(b);
  g_addr[i] = (uint64_t)(uintptr_t)b ^ MASK;
  g_after[i] = now_ns();
}

static void *leaker(void *arg) {
  (void)arg;
  struct timespec pause = {0, 100000};
  while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE) && g_count < MAX_LEAKS) {
    leak_one(g_count);
    __atomic_store_n(&g_count, g_count + 1, __ATOMIC_RELEASE);
    nanosleep(&pause, NULL);
  }
  return NULL;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, NULL, leaker, NULL);
  while (__atomic_load_n(&g_count, __ATOMIC_ACQUIRE) < 100) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  wipe();
  ready("leaking=1");
  char c;
  if (read(0, &c, 1) <= 0) return 0;
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  for (unsigned i = 0; i < g_count; i++)
    printf("%llx %llu %llu\n", (unsigned long long)(g_addr[i] ^ MASK),
           (unsigned long long)g_before[i], (unsigned long long)g_after[i]);
  printf("END\n");
  fflush(stdout);
  wait_for_test();
  return 0;
}
