/* A program whose leaks come through its library's entry point and its
 * allocation wrapper (table_alloc.c, linked): the tests build it plain and
 * stripped. At start: one 40-byte table starting "users"; on "grow" (a
 * line on stdin): another, from another function, starting "hosts", then
 * GROWN. */
#include "../../scan/programs/scenario.h"

void *table_new(const char *name);

void *volatile sink;

__attribute__((noinline)) static void load_users(void) {
  sink = table_new("users");
  sink = NULL;
}

__attribute__((noinline)) static void load_hosts(void) {
  sink = table_new("hosts");
  sink = NULL;
}

int main(void) {
  load_users();
  wipe();
  ready("leak_count=1 leak_bytes=40");
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "grow", 4) == 0) {
      load_hosts();
      wipe();
      printf("GROWN leak_count=2 leak_bytes=80\n");
      fflush(stdout);
    }
  }
  return 0;
}
