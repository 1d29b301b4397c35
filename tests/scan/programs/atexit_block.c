/* More atexit handlers than glibc's static list holds (32): glibc callocs
 * the next list, and the only pointer to it is __exit_funcs in libc's data,
 * 0x440 bytes below main_arena on Debian 12's libc. While main_arena was
 * found at the wrong place, that pointer was cut out of the roots and the
 * block reported leaked. One block is dropped. */
#include "scenario.h"

static void handler(void) {}

int main(void) {
  for (int i = 0; i < 40; i++) atexit(handler);
  KEEP(malloc(40));
  wipe();
  ready("leak_count=1 leak_bytes=40");
  wait_for_test();
  return 0;
}
