/* A program that rebuilds its environment the moment main starts, as
 * redis-server's setproctitle does (clearenv, then setenv one by one: glibc
 * reallocates and frees the environ array as it grows). The shim's helper
 * thread, started by the shim's constructor just before, must not read
 * GLIBC_TUNABLES with getenv as it begins: it would walk an array being
 * freed and refilled with string bytes (a SIGSEGV one start in 20). */
#include <time.h>

#include "shimtest.h"

int main(void) {
  static char names[256][16], values[256][16];
  int n = 0;
  for (char **e = environ; *e && n < 256; e++, n++) {
    char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    snprintf(names[n], sizeof names[n], "%.*s", (int)(len < 15 ? len : 15), *e);
    snprintf(values[n], sizeof values[n], "%.15s", eq ? eq + 1 : "");
  }
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    clearenv();
    for (int i = 0; i < n; i++) setenv(names[i], values[i], 1);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000000L);
  CHECK(shim_desc() != NULL);
  puts("OK");
  return 0;
}
