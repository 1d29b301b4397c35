/* A library the tests strip and load twice (twice_loaded.c): each load has
 * statics of its own, in .bss past the file's pages and in .data. */
#include <stddef.h>

static void *volatile table[65536];
static void *volatile data[4] = {(void *)1};

void keep(void *in_bss, void *in_data) {
  table[60000] = in_bss;
  data[2] = in_data;
}
