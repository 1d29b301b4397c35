/* Calls that need a process of one thread: joining a mount namespace (the
 * threads share a filesystem context) or a time namespace, and making a
 * user namespace. argv[1] "shim": also check that the shim's helper thread
 * comes back after each and that the registry still follows the program.
 * Prints what each call returned, so a run without the shim gives the
 * lines to compare with. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>

#include "shimtest.h"

/* The helper running (a new one starts as the call returns, with no
 * allocation needed), and the registry following the program. */
static void helper_back(void) {
  struct ur_descriptor *d = shim_desc();
  for (int i = 0; i < 2000 && !__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE); i++)
    nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
  uint32_t tid = __atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE);
  CHECK(tid != 0 && tid != (uint32_t)getpid());
  void *p = malloc(100);
  CHECK(registered_with_size(p, 100));
  free(p);
  CHECK(!registry_find(p, NULL, NULL));
}

static int shim;

/* Prints what the call returned; under the shim, then checks that a
 * helper runs again, so the next call has one to step aside. */
static void report(const char *what, int r) {
  printf("%s: %s\n", what, r == 0 ? "ok" : strerror(errno));
  if (shim) helper_back();
}

static void setns_to_own(const char *ns, int nstype, const char *what) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/ns/%s", ns);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    printf("%s: no such namespace\n", what);
    return;
  }
  report(what, setns(fd, nstype));
  close(fd);
}

int main(int argc, char **argv) {
  shim = argc > 1 && !strcmp(argv[1], "shim");
  if (shim) helper_back(); /* running before the calls */
  setns_to_own("mnt", CLONE_NEWNS, "setns mnt");
  setns_to_own("mnt", 0, "setns any");
  setns_to_own("time", CLONE_NEWTIME, "setns time");
  /* A vfork child is its own thread group: nothing to step aside for, and
   * the parent's helper must stay as it is. */
  struct ur_descriptor *d = shim ? shim_desc() : NULL;
  uint32_t helper = d ? __atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE) : 0;
  int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0);
  pid_t child = vfork();
  if (child == 0) _exit(setns(fd, CLONE_NEWNS) == 0 ? 0 : 1);
  int status = 0;
  CHECK(child > 0 && waitpid(child, &status, 0) == child);
  close(fd);
  printf("setns mnt in a vfork child: %s\n", WIFEXITED(status) && !WEXITSTATUS(status) ? "ok" : "failed");
  if (shim) CHECK(__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE) == helper);
  report("unshare user", unshare(CLONE_NEWUSER));
  printf("OK\n");
  return 0;
}
