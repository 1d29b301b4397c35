/* A program whose leaks come through its library's allocation wrapper
 * (table_alloc.c, linked): the tests build it plain and stripped. At start:
 * one 40-byte table starting "users"; on "grow" (a line on stdin): another,
 * from another function, starting "hosts", then GROWN. */
#include "../../scan/programs/scenario.h"

void *table_alloc(size_t size);

void *volatile sink;

__attribute__((noinline)) static void load_users(void) {
  char *t = table_alloc(40);
  memcpy(t, "users", 5);
  sink = t;
  sink = NULL;
}

__attribute__((noinline)) static void load_hosts(void) {
  char *t = table_alloc(40);
  memcpy(t, "hosts", 5);
  sink = t;
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
