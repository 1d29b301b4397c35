/* Run with an allocator or a malloc wrapper preloaded ahead of the shim:
 * blocks freed, one leaked through malloc, one through calloc. */
#include "../../scan/programs/scenario.h"

__attribute__((noinline)) static void setup(void) {
  void *freed[3] = {malloc(100), calloc(1, 472), malloc(5000)};
  for (int i = 0; i < 3; i++) {
    KEEP(freed[i]);
    free(freed[i]);
  }
  char *grown = realloc(malloc(10), 2000);
  KEEP(grown);
  free(grown);
  KEEP(malloc(300));
  KEEP(calloc(1, 40));
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=2 leak_bytes=340");
  wait_for_test();
  return 0;
}
