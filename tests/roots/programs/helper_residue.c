/* One leaked block whose address the program prints: the test writes that
 * address into the shim's helper thread's dead stack, as the helper's own
 * work (an arena range it collapsed) leaves such words there. */
#include "../../scan/programs/scenario.h"

__attribute__((noinline)) static void *make(void) { return malloc(4000); }

int main(void) {
  void *p = make();
  unsigned long at = (unsigned long)p;
  KEEP(p);
  p = NULL;
  wipe();
  ready("leak_count=1 leak_bytes=4000 leaked=%lu", at);
  wait_for_test();
  return 0;
}
