/* The C interface (NoLeaks, LogUnreachableMemory) called from inside a
 * program running under the shim. One mode per argv[1]; results are printed
 * as "name value" lines on stdout, the log goes to stderr. */
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <unreachable/memunreachable.h>

#include "../../scan/programs/scenario.h"

static volatile uintptr_t hidden;  /* ~ptr: invisible to the scanner */
static void *volatile visible;     /* a root */

__attribute__((noinline)) static void make_hidden(size_t size, const char *text) {
  char *p = malloc(size);
  memset(p, 0, size);
  if (text) memcpy(p, text, strlen(text));
  hidden = ~(uintptr_t)p;
}

__attribute__((noinline)) static void reveal(void) { visible = (void *)~hidden; }

__attribute__((noinline)) static void release(void) {
  free(visible);
  visible = NULL;
  hidden = 0;
}

__attribute__((noinline)) static void result(const char *name, int value) {
  printf("%s %d\n", name, value);
  fflush(stdout);
}

#define CHECK(name, call) \
  do {                    \
    wipe();               \
    result(name, call);   \
  } while (0)

static int basic(void) {
  CHECK("clean", NoLeaks());
  make_hidden(1024, NULL);
  reveal();
  CHECK("reachable", NoLeaks());
  visible = NULL;
  CHECK("dropped", NoLeaks());
  CHECK("dropped_again", NoLeaks());
  reveal();
  CHECK("restored", NoLeaks());
  release();
  CHECK("freed", NoLeaks());
  return 0;
}

/* The log goes to `path` (stderr redirected), then the test scans us. */
static int log_mode(int contents, const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || dup2(fd, 2) < 0) return 1;
  close(fd);
  make_hidden(24, "hello leak");
  wipe();
  result("log", LogUnreachableMemory(contents, 100));
  wipe();
  ready("leak_count=1");
  wait_for_test();
  return 0;
}

/* A failed call, then a good one, then a failed one: each call stands alone. */
static int recover(const char *bad, const char *good) {
  setenv("UNREACHABLE_CLI", bad, 1);
  CHECK("bad", NoLeaks());
  setenv("UNREACHABLE_CLI", good, 1);
  CHECK("good", NoLeaks());
  setenv("UNREACHABLE_CLI", bad, 1);
  CHECK("bad_again", LogUnreachableMemory(false, 10));
  return 0;
}

/* Root without CAP_SYS_PTRACE, and not dumpable: no scanner may trace us. */
static int no_permission(void) {
  if (prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) != 0) {
    result("skip", 1);
    return 0;
  }
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) != 0) return 1;
  d[0].effective &= ~(1u << CAP_SYS_PTRACE);
  d[0].permitted &= ~(1u << CAP_SYS_PTRACE);
  d[0].inheritable &= ~(1u << CAP_SYS_PTRACE);
  if (syscall(SYS_capset, &h, d) != 0) return 1;
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  CHECK("noleaks", NoLeaks());
  CHECK("log", LogUnreachableMemory(false, 10));
  return 0;
}

/* Drop to nobody (the test made our files readable), as a daemon would. */
static int as_nobody(int dumpable) {
  if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) return 1;
  prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);  /* setuid cleared it */
  result("uid", (int)getuid());
  CHECK("clean", NoLeaks());
  make_hidden(512, NULL);
  CHECK("dropped", NoLeaks());
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *mode = argv[1];
  if (strcmp(mode, "basic") == 0) return basic();
  if (strcmp(mode, "log") == 0 && argc == 3) return log_mode(1, argv[2]);
  if (strcmp(mode, "log-nocontents") == 0 && argc == 3) return log_mode(0, argv[2]);
  if (strcmp(mode, "recover") == 0 && argc == 4) return recover(argv[2], argv[3]);
  if (strcmp(mode, "one") == 0) {
    if (!NoLeaks) { /* weak: NULL without the shim */
      result("noshim", 1);
      return 0;
    }
    CHECK("noleaks", NoLeaks());
    return 0;
  }
  if (strcmp(mode, "no-permission") == 0) return no_permission();
  if (strcmp(mode, "nobody") == 0) return as_nobody(1);
  if (strcmp(mode, "nobody-notdumpable") == 0) return as_nobody(0);
  return 2;
}
