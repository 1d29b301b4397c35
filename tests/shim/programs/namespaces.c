/* Calls that need a process of one thread: joining a mount namespace (the
 * threads share a filesystem context) and making user namespaces. argv[1]
 * "shim": also check that the shim's helper thread comes back after each
 * and that the registry still follows the program. Prints what each call
 * returned, so a run without the shim gives the lines to compare with. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <time.h>

#include "shimtest.h"

static void report(const char *what, int r) {
  printf("%s: %s\n", what, r == 0 ? "ok" : strerror(errno));
}

static void helper_back(void) {
  struct ur_descriptor *d = shim_desc();
  void *p = malloc(100); /* the allocation that starts the new helper */
  CHECK(registered_with_size(p, 100));
  for (int i = 0; i < 2000 && !__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE); i++)
    nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
  uint32_t tid = __atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE);
  CHECK(tid != 0 && tid != (uint32_t)getpid());
  free(p);
  CHECK(!registry_find(p, NULL, NULL));
}

int main(int argc, char **argv) {
  int shim = argc > 1 && !strcmp(argv[1], "shim");
  if (shim) helper_back(); /* running before the calls */
  int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0);
  report("setns mnt", setns(fd, CLONE_NEWNS));
  report("setns any", setns(fd, 0));
  close(fd);
  if (shim) helper_back();
  report("unshare user", unshare(CLONE_NEWUSER));
  if (shim) helper_back();
  report("unshare user again", unshare(CLONE_NEWUSER | CLONE_NEWNS));
  if (shim) helper_back();
  printf("OK\n");
  return 0;
}
