/* A stripped program (no .symtab, the variable not exported) whose only
 * pointer to a block lies in a .bss larger than a page: the kernel maps
 * the .bss past the file's pages anonymous, so /proc/PID/maps names no
 * file there, as in a distribution's stripped server (mariadbd's 9 MiB). */
#include "scenario.h"

static void *table[65536];

int main(void) {
  table[60000] = malloc(100);
  wipe();
  ready("block=%lu slot=%lu", (unsigned long)(uintptr_t)table[60000],
        (unsigned long)(uintptr_t)&table[60000]);
  wait_for_test();
  return 0;
}
