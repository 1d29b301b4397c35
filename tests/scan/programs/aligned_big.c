/* Blocks glibc maps alone with an alignment beyond its own: memalign moves
 * the chunk into its mapping (prev_size = the distance), so its header is
 * no longer at a page start. One of each kept, one of each dropped. */
#include <stdlib.h>

#include "scenario.h"

void *g_kept[2];

__attribute__((noinline)) static void setup(void) {
  g_kept[0] = aligned_alloc(65536, 1 << 20);
  if (posix_memalign(&g_kept[1], 256, 300000)) exit(3);
  void *lost[2] = {aligned_alloc(65536, 1 << 20), NULL};
  if (posix_memalign(&lost[1], 256, 300000)) exit(3);
  KEEP(lost[0]);
  KEEP(lost[1]);
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=2 leak_bytes=%d", (1 << 20) + 300000);
  wait_for_test();
  return 0;
}
