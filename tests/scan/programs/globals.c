/* The only pointer to a block in .data, in .bss; one block dropped. */
#include "scenario.h"

void *g_data = (void *)1; /* initialised: .data */
void *g_bss;              /* zero: .bss */

__attribute__((noinline)) static void setup(void) {
  g_data = malloc(100);
  g_bss = malloc(200);
  void *lost = malloc(300);
  KEEP(lost);
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=300");
  wait_for_test();
  return 0;
}
