/* A correct program that trusts malloc_usable_size: for blocks of 1..256
 * bytes it keeps the only pointer to a second block in the first block's
 * tail, past the requested size but inside what malloc_usable_size allows.
 * A scan must find no leak whatever the options. The READY line says how
 * many pointers went into a tail (with glibc's answer, most of them) and how
 * many blocks reported a usable size other than their requested size. */
#include <malloc.h>

#include "../../scan/programs/scenario.h"

#define BLOCKS 256

void *holders[BLOCKS]; /* reachable from .bss (not static: never read here) */

__attribute__((noinline)) static void build(size_t *stored, size_t *differ) {
  for (size_t i = 0; i < BLOCKS; i++) {
    size_t n = i + 1;
    char *a = malloc(n);
    holders[i] = a;
    size_t usable = malloc_usable_size(a);
    if (usable != n) (*differ)++;
    size_t slot = (n + 7) & ~(size_t)7;
    if (slot + sizeof(void *) > usable) continue;
    void *b = malloc(48);
    memcpy(a + slot, &b, sizeof b); /* the only copy of b */
    (*stored)++;
  }
}

int main(void) {
  size_t stored = 0, differ = 0;
  build(&stored, &differ);
  wipe();
  ready("leak_count=0 leak_bytes=0 stored=%zu differ=%zu", stored, differ);
  wait_for_test();
  return 0;
}
