/* A big block the program has barely touched (R's vectors, a buffer
 * sized for the worst case): 8 MiB from malloc, mapped alone, whose middle
 * pages were never written, so whole chunks of it are absent. Its last page
 * holds the only pointer to one block. One block leaked beside it. */
#include "../../scan/programs/scenario.h"

#define BIG_BYTES ((size_t)8 << 20)

void **volatile big_holder;

__attribute__((noinline)) static void setup(void) {
  void **big = malloc(BIG_BYTES);
  if (!big) exit(3);
  big[0] = (void *)1;
  big[BIG_BYTES / sizeof(void *) - 1] = malloc(200); /* kept by the last page only */
  big_holder = big;
  KEEP(malloc(300));
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=300");
  wait_for_test();
  return 0;
}
