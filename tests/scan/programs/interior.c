/* An interior pointer and a pointer one past the end keep a block alive; an
 * unaligned copy of a pointer does not. */
#include <stdint.h>

#include "scenario.h"

char *g_interior;
unsigned char g_unaligned[32];
char *g_past_end;

__attribute__((noinline)) static void setup(void) {
  char *a = malloc(256);
  g_interior = a + 100;
  char *b = malloc(64);
  uintptr_t v = (uintptr_t)b;
  memcpy(g_unaligned + 3, &v, sizeof v);
  char *c = malloc(80);
  g_past_end = c + 80;
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=64");
  wait_for_test();
  return 0;
}
