/* Retitles itself as nginx and postgres do (setproctitle): the title is
 * written over argv and the environment strings that follow it, the memory
 * /proc/PID/environ shows, so LD_PRELOAD can no longer be read there. The
 * heap is globals.c's: one block dropped. */
#include <string.h>

#include "../../scan/programs/scenario.h"

#include "../../scan/programs/globals_heap.h"

extern char **environ;

int main(int argc, char **argv) {
  char *end = argv[argc - 1] + strlen(argv[argc - 1]);
  for (char **e = environ; *e; e++)
    if (*e == end + 1) end = *e + strlen(*e);
  memset(argv[0], 0, (size_t)(end - argv[0]));
  strcpy(argv[0], "retitled: main process");
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=300");
  wait_for_test();
  return 0;
}
