/* The only pointer to a block lives in main's frame, above SP. */
#include "scenario.h"

__attribute__((noinline)) static void *make(size_t n) { return malloc(n); }
__attribute__((noinline)) static void drop(void) { KEEP(malloc(48)); }

int main(void) {
  void *volatile kept = make(64);
  drop();
  wipe();
  ready("leak_count=1 leak_bytes=48");
  wait_for_test();
  KEEP(kept);
  return 0;
}
