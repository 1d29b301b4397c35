/* The second file-static `table` of static_twice.c's program. */
#include <stdlib.h>

static void *volatile table; /* volatile: a static only written is optimised away */

void *other_table(void) {
  table = malloc(200);
  return table;
}
