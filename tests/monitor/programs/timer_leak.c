/* Leaks on a timer: every PERIOD_MS milliseconds one block of SIZE bytes is
 * allocated and its only pointer dropped, from one call site, forever.
 *   timer_leak [SIZE [PERIOD_MS]]     (defaults 1000 bytes, 200 ms)
 * Prints `READY size=... period_ms=...` first; runs until killed. */
#include <time.h>

#include "../../scan/programs/scenario.h"

__attribute__((noinline)) static void leak_one(size_t size) {
  char *p = malloc(size);
  if (p) memset(p, 0xab, size);
  KEEP(p);
}

int main(int argc, char **argv) {
  size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 1000;
  long period_ms = argc > 2 ? strtol(argv[2], NULL, 0) : 200;
  struct timespec period = {period_ms / 1000, (period_ms % 1000) * 1000000L};
  ready("size=%zu period_ms=%ld", size, period_ms);
  for (;;) {
    leak_one(size);
    wipe();
    nanosleep(&period, NULL);
  }
}
