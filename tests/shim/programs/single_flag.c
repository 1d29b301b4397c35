/* What glibc believes about threads under the shim: one thread while the
 * program has one (the helper is not counted), several once the program
 * starts one, and a set*id() call does not change that back. */
#include <pthread.h>
#include <sys/single_threaded.h>

#include "shimtest.h"

static void *idle(void *arg) {
  (void)arg;
  return NULL;
}

int main(void) {
  struct ur_descriptor *d = shim_desc();
  for (int i = 0; i < 100000 && !__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE); i++) usleep(100);
  CHECK(__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE) != 0);
  CHECK(__libc_single_threaded == 1);
  CHECK(setresuid((uid_t)-1, (uid_t)-1, (uid_t)-1) == 0); /* no change of ids */
  CHECK(__libc_single_threaded == 1);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, idle, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(__libc_single_threaded == 0);
  CHECK(setresuid((uid_t)-1, (uid_t)-1, (uid_t)-1) == 0);
  CHECK(__libc_single_threaded == 0); /* glibc keeps knowing */
  printf("OK\n");
  return 0;
}
