/* One leaked block whose address the test learns, masked: a program still
 * inside ready() as the scan stops it would otherwise hold the address it
 * prints in its registers. The test writes the address into the shim's
 * helper thread's dead stack, as the helper's own work (an arena range it
 * collapsed) leaves such words there. */
#include "../../scan/programs/scenario.h"

#define MASK 0xa5a5a5a5a5a5a5a5ul

static volatile unsigned long g_masked;

__attribute__((noinline)) static void *make(void) { return malloc(4000); }

int main(void) {
  void *p = make();
  g_masked = (unsigned long)p ^ MASK;
  KEEP(p);
  p = NULL;
  wipe();
  ready("leak_count=1 leak_bytes=4000 masked=%lu", g_masked);
  wait_for_test();
  return 0;
}
