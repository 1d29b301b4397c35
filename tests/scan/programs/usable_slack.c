/* A program that uses all malloc_usable_size promises: the last word of that
 * space holds the only pointer to another block, which is therefore kept.
 * glibc rounds malloc(9) up to 24 usable bytes, past what a scan reads of a
 * 9-byte block; the shim answers 9, as ASan and valgrind do. One block is
 * dropped. */
#include <malloc.h>
#include <stdint.h>

#include "scenario.h"

char *g_holder;

int main(void) {
  g_holder = malloc(9);
  size_t usable = malloc_usable_size(g_holder);
  void *held = malloc(48);
  memcpy(g_holder + ((usable - 8) & ~(size_t)7), &held, sizeof held);
  held = NULL;
  KEEP(malloc(33));
  wipe();
  ready("leak_count=1 leak_bytes=33 usable=%zu", usable);
  wait_for_test();
  return 0;
}
