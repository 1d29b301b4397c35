/* Blocks of every size map level (up to 248 bytes, up to 4088, larger),
 * interleaved over many megabytes, all held by a global array: a registry
 * whose size maps hold entries at all three levels of many maps. */
#include "../../scan/programs/scenario.h"

#define BLOCKS 60000

static void *g_blocks[BLOCKS];

int main(void) {
  static const size_t sizes[] = {24, 200, 248, 249, 1000, 4088, 4089, 9000};
  for (int i = 0; i < BLOCKS; i++) g_blocks[i] = malloc(sizes[i % 8]);
  wipe();
  ready("leak_count=0 leak_bytes=0");
  wait_for_test();
  KEEP(g_blocks);
  return 0;
}
