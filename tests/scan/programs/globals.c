/* The only pointer to a block in .data, in .bss; one block dropped. */
#include "scenario.h"

#include "globals_heap.h"

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=300");
  wait_for_test();
  return 0;
}
