/* Two file-static variables named `table`, one in this file and one in
 * static_twice_other.c, each holding the only pointer to a block of its
 * own size: two retainers that a name alone cannot tell apart. */
#include "scenario.h"

static void *table;

void *other_table(void);

int main(void) {
  table = malloc(100);
  void *other = other_table();
  wipe();
  ready("block=%lu other=%lu", (unsigned long)(uintptr_t)table, (unsigned long)(uintptr_t)other);
  wait_for_test();
  return 0;
}
