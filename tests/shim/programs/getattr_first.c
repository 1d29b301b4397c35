/* Threads whose first allocation happens inside pthread_getattr_np, as every
 * JVM thread's does: glibc holds the thread's own lock while it allocates
 * there (the cpuset), so attaching the thread must not ask
 * pthread_getattr_np for its stack again: it would wait on that lock for
 * ever. The slot still gets the thread's stack bounds, at its exit. */
#include <pthread.h>
#include <time.h>

#include "shimtest.h"

static struct ur_thread_slot *slot;
static uintptr_t lo, hi;

static void *worker(void *arg) {
  (void)arg;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return (void *)1;
  void *addr;
  size_t size;
  if (pthread_attr_getstack(&attr, &addr, &size) != 0) return (void *)2;
  pthread_attr_destroy(&attr);
  lo = (uintptr_t)addr;
  hi = (uintptr_t)addr + size;
  slot = my_slot();
  return NULL;
}

int main(void) {
  for (int i = 0; i < 20; i++) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    void *r;
    if (pthread_timedjoin_np(t, &r, &until) != 0) {
      printf("DEADLOCK in thread %d\n", i);
      return 1;
    }
    CHECK(r == NULL && slot != NULL);
    CHECK(slot->state == UR_THREAD_EXITED);
    CHECK(slot->stack_lo == lo && slot->stack_hi == hi);
  }
  printf("OK\n");
  return 0;
}
