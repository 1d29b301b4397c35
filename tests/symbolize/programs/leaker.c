/* Leaks one block from a named function, then waits: a scan target whose
 * frames the test expects symbolized. */
#include "../../scan/programs/scenario.h"

__attribute__((noinline)) void leaker_lost_block(void) {
  char *p = malloc(48);
  KEEP(p);
}

int main(void) {
  leaker_lost_block();
  wipe();
  ready("leak_bytes=48");
  wait_for_test();
  return 0;
}
