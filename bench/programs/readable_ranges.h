#ifndef UR_BENCH_READABLE_RANGES_H
#define UR_BENCH_READABLE_RANGES_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* What the scanner would list as readable: every readable mapping of this
 * process, as (start, end) pairs; how many. */
static size_t readable_ranges(uint64_t *r, size_t max) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[512];
  size_t n = 0;
  while (n < max && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[5];
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && perms[0] == 'r' &&
        !strstr(line, "[vvar") && !strstr(line, "[vsyscall")) {
      r[2 * n] = lo;
      r[2 * n + 1] = hi;
      n++;
    }
  }
  fclose(f);
  return n;
}

#endif
