/* Run as root: the program gives up root with set*id(); the shim's helper
 * thread must give it up too (glibc applies set*id to every thread only when
 * it knows there are several). Prints SKIP when not root. */
#include <grp.h>
#include <sys/types.h>

#include "shimtest.h"

static void status_line(uint32_t tid, const char *key, char *out, size_t len) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%u/status", tid);
  FILE *f = fopen(path, "r");
  CHECK(f);
  out[0] = '\0';
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, strlen(key)) == 0) snprintf(out, len, "%s", line + strlen(key));
  fclose(f);
}

int main(void) {
  if (getuid() != 0) {
    printf("SKIP\n");
    return 0;
  }
  struct ur_descriptor *d = shim_desc();
  for (int i = 0; i < 100000 && !__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE); i++) usleep(100);
  uint32_t helper = __atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE);
  CHECK(helper != 0);
  CHECK(setgroups(0, NULL) == 0);
  CHECK(setresgid(65534, 65534, 65534) == 0);
  CHECK(setresuid(65534, 65534, 65534) == 0);
  char uid[128], gid[128], groups[128];
  status_line(helper, "Uid:", uid, sizeof uid);
  status_line(helper, "Gid:", gid, sizeof gid);
  status_line(helper, "Groups:", groups, sizeof groups);
  const char *ids = "\t65534\t65534\t65534\t65534\n";
  if (strcmp(uid, ids) != 0 || strcmp(gid, ids) != 0 || strpbrk(groups, "0123456789")) {
    printf("helper kept Uid:%sGid:%sGroups:%s", uid, gid, groups);
    return 1;
  }
  void *p = malloc(100); /* the allocator still works */
  CHECK(p);
  free(p);
  printf("OK\n");
  return 0;
}
