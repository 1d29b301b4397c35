/* The heap of globals.c, for the programs that need "one known leak" and
 * test something else: one block held from .data, one from .bss, one
 * 300-byte block dropped (leak_count=1 leak_bytes=300). Include once, in the
 * program's only translation unit, after scenario.h. */
#ifndef GLOBALS_HEAP_H
#define GLOBALS_HEAP_H

void *g_data = (void *)1; /* initialised: .data */
void *g_bss;              /* zero: .bss */

__attribute__((noinline)) static void setup(void) {
  g_data = malloc(100);
  g_bss = malloc(200);
  void *lost = malloc(300);
  KEEP(lost);
}

#endif
