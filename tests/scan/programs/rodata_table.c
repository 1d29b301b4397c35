/* A 4 MiB constant table in the program's .rodata, right below its .data,
 * that the program never reads: the 1 MiB chunks a scan reads around the
 * globals round out over the table's last pages, and reading those through
 * /proc/PID/mem would fault them into the target (a real server's RSS grew
 * by half at each scan, its libraries' code read that way). */
#include "scenario.h"

#define TABLE_BYTES (4u << 20)

/* Non-zero, so that it is file-backed .rodata and not .bss. */
__attribute__((used)) static const unsigned char table[TABLE_BYTES] = {1, 2, 3};
static void *kept;

int main(void) {
  kept = malloc(64);  /* reachable from .data */
  KEEP(malloc(48)); /* dropped */
  wipe();
  ready("leak_count=1 leak_bytes=48 table=%lu table_bytes=%u", (unsigned long)(uintptr_t)table,
        TABLE_BYTES);
  wait_for_test();
  return kept == NULL;
}
