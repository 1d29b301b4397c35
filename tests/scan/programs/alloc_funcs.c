/* One block leaked through every allocation function, one kept through each. */
#include <malloc.h>

#include "scenario.h"

void *g_kept[9];

__attribute__((noinline)) static void via_all(void **out) {
  void *p = NULL;
  out[0] = malloc(101);
  out[1] = calloc(3, 34);                   /* 102 */
  out[2] = realloc(malloc(10), 103);
  out[3] = reallocarray(NULL, 1, 104);
  posix_memalign(&p, 64, 105);
  out[4] = p;
  out[5] = memalign(128, 106);
  out[6] = aligned_alloc(256, 512);         /* size a multiple of the alignment */
  out[7] = valloc(108);
  out[8] = pvalloc(109);                    /* rounded up to a page: 4096 */
}

int main(void) {
  void *lost[9];
  via_all(g_kept);
  via_all(lost);
  for (int i = 0; i < 9; i++) lost[i] = NULL;
  KEEP(lost);
  wipe();
  ready("leak_count=9 leak_bytes=%d", 101 + 102 + 103 + 104 + 105 + 106 + 512 + 108 + 4096);
  wait_for_test();
  return 0;
}
