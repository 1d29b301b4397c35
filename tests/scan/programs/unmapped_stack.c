/* A thread's stack too big for glibc's stack cache (40 MiB) is unmapped once
 * the thread is joined; the program then maps memory of its own at exactly
 * those bounds and keeps its only pointer to a block there. The shim still
 * records the exited thread's stack bounds, but what is there now is the
 * program's memory: a root, not a cached stack. */
#include <pthread.h>
#include <sys/mman.h>

#include "scenario.h"

#define STACK (64u << 20)

static void *bounds[2];

static void *run(void *arg) {
  (void)arg;
  pthread_attr_t a;
  size_t size;
  pthread_getattr_np(pthread_self(), &a);
  pthread_attr_getstack(&a, &bounds[0], &size);
  bounds[1] = (char *)bounds[0] + size;
  pthread_attr_destroy(&a);
  return NULL;
}

int main(void) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, STACK);
  pthread_t t;
  pthread_create(&t, &a, run, NULL);
  pthread_join(t, NULL);
  size_t len = (size_t)((char *)bounds[1] - (char *)bounds[0]);
  void **mine = mmap(bounds[0], len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (mine == MAP_FAILED) {
    perror("mmap at the old stack's bounds");
    return 1;
  }
  mine[0] = malloc(100);
  void *leak = malloc(33);
  KEEP(leak);
  leak = NULL;
  wipe();
  ready("leak_count=1 leak_bytes=33");
  wait_for_test();
  return 0;
}
