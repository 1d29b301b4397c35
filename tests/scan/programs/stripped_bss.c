/* A stripped program (no .symtab, the variable not exported) whose only
 * pointer to a block lies in a .bss larger than a page: the kernel maps
 * the .bss past the file's pages anonymous, so /proc/PID/maps names no
 * file there, as in a distribution's stripped server (mariadbd's 9 MiB).
 * A second block is held from .data, in the file's own writable pages,
 * where a stripped library holds its statics (Samba's passdb module). */
#include "scenario.h"

static void *table[65536];
static void *data[4] = {(void *)1};

int main(void) {
  table[60000] = malloc(100);
  data[2] = malloc(200);
  wipe();
  ready("block=%lu slot=%lu data_block=%lu data_slot=%lu",
        (unsigned long)(uintptr_t)table[60000],
        (unsigned long)(uintptr_t)&table[60000],
        (unsigned long)(uintptr_t)data[2], (unsigned long)(uintptr_t)&data[2]);
  wait_for_test();
  return 0;
}
