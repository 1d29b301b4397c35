/* Three blocks, their addresses printed as text (no pointer survives in
 * memory but g_held's): one held from .bss, two dropped. The test's
 * allocation source lists only the first two. */
#include "scenario.h"

void *g_held; /* not static: a store the compiler must keep */
static char g_where[256];

__attribute__((noinline)) static void setup(void) {
  g_held = malloc(100);
  void *lost = malloc(300);
  void *unlisted = malloc(500);
  snprintf(g_where, sizeof g_where, "held=%p lost=%p unlisted=%p", g_held, lost, unlisted);
  KEEP(lost);
  KEEP(unlisted);
}

int main(void) {
  setup();
  wipe();
  ready("%s", g_where);
  wait_for_test();
  return 0;
}
