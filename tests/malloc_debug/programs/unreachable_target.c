/* check_unreachable_on_signal target: one 300-byte leak (like scan's
 * globals.c), then idle (no allocation at all) or busy (allocating in a loop
 * on the main thread) until killed or stdin closes. */
#include "../../scan/programs/scenario.h"

#include "../../scan/programs/globals_heap.h"

int main(int argc, char **argv) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=300");
  if (argc > 1 && !strcmp(argv[1], "busy")) {
    for (;;) {
      void *p = malloc(48);
      KEEP(p);
      free(p);
    }
  }
  wait_for_test();
  return 0;
}
