/* A block glibc maps alone, dropped, while the program holds the address
 * where its mapping ends: the start of whatever is mapped next, a value a
 * program keeps for reasons of its own (a stale mmap result, a region's
 * base). Before glibc 2.43 the chunk's usable end is its mapping's end, but
 * no request reaches it, so the value is not one past the block: it leaks. */
#include <stdint.h>
#include <stdio.h>

#include "scenario.h"

#define MAPPED_SIZE 200000

uintptr_t g_next_mapping;

/* The end of the mapping holding p, from /proc/self/maps. */
static uintptr_t mapping_end(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) exit(3);
  unsigned long lo, hi, end = 0;
  char line[512];
  while (!end && fgets(line, sizeof line, f))
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= (uintptr_t)p && (uintptr_t)p < hi) end = hi;
  fclose(f);
  if (!end) exit(3);
  return end;
}

__attribute__((noinline)) static void setup(void) {
  void *lost = malloc(MAPPED_SIZE);
  g_next_mapping = mapping_end(lost);
  KEEP(lost);
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=%d next_mapping=%#lx", MAPPED_SIZE, (unsigned long)g_next_mapping);
  wait_for_test();
  return 0;
}
