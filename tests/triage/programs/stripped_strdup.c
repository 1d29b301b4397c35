/* A stripped program (built with -s: its own frames have no name) whose
 * leaks come from strdup, as postfix's daemons keep a strdup'ed
 * "mail_version=..." from their main. At start: one 17-byte string; on
 * "grow" (a line on stdin): another, from another place, then GROWN. */
#include "../../scan/programs/scenario.h"

void *volatile sink;

__attribute__((noinline)) static void keep_version(void) {
  sink = strdup("mail_version=3.7");
  sink = NULL;
}

__attribute__((noinline)) static void keep_name(void) {
  sink = strdup("myhostname=local");
  sink = NULL;
}

int main(void) {
  keep_version();
  wipe();
  ready("leak_count=1 leak_bytes=17");
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "grow", 4) == 0) {
      keep_name();
      wipe();
      printf("GROWN leak_count=2 leak_bytes=34\n");
      fflush(stdout);
    }
  }
  return 0;
}
