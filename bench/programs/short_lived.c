/* A short-lived program: N allocations kept reachable from a global array
 * (a parsed config, say), one freed, then exit. What a test suite runs
 * by the thousand; bench/exit_check_bench.py times it start to exit. */
#include <stdio.h>
#include <stdlib.h>

/* A global, not main's local: the check runs after main has returned, when
 * its frame is gone and a block only it held is a leak. */
void **kept;

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  kept = malloc((size_t)n * sizeof *kept);
  for (long i = 0; i < n; i++) kept[i] = malloc(32 + (size_t)(i % 64));
  free(malloc(100));
  printf("%p\n", (void *)kept);
  return 0;
}
