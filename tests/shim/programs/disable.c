/* malloc_disable blocks other threads' allocator calls until malloc_enable;
 * the disabling thread keeps allocating; disable nests. */
#include <pthread.h>
#include <stdatomic.h>

#include "shimtest.h"

static atomic_int started, done;
static void *volatile sink; /* keeps GCC from deleting malloc/free pairs */

static void *other(void *arg) {
  (void)arg;
  atomic_store(&started, 1);
  sink = malloc(64); /* blocks while disabled */
  free(sink);
  atomic_store(&done, 1);
  return NULL;
}

int main(void) {
  void (*disable)(void) = SHIM_FN(malloc_disable);
  void (*enable)(void) = SHIM_FN(malloc_enable);
  sink = malloc(1); /* this thread is known to the shim */
  free(sink);

  disable();
  disable(); /* nested */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, other, NULL) == 0); /* allocates: allowed for us */
  while (!atomic_load(&started)) usleep(1000);
  usleep(200000);
  CHECK(!atomic_load(&done));
  void *mine = malloc(100); /* the disabling thread may still allocate */
  CHECK(mine && registered_with_size(mine, 100));
  free(mine);
  enable();
  usleep(100000);
  CHECK(!atomic_load(&done)); /* still one level of disable */
  enable();
  pthread_join(t, NULL);
  CHECK(atomic_load(&done));
  enable(); /* unbalanced enable is harmless */
  void *p = malloc(5);
  CHECK(registered_with_size(p, 5));
  free(p);
  printf("OK\n");
  return 0;
}
