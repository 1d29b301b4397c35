/* Blocks kept only by a pointer one past their end, as a C array is by its
 * end (PHP keeps each function's arg_info by arg_info + 1 and frees it
 * through ptr - 1): each is in use. One block nothing points to leaks. The
 * sizes cover a chunk's slack and none: 32 bytes in 40 usable, 24 in 24,
 * and the largest request glibc maps alone in 1 MiB (usable 8 bytes more:
 * a chunk mapped alone always ends past its request). */
#include <stdint.h>

#include "scenario.h"

#define MAPPED_SIZE (256 * 4096 - 24)

char *g_end_slack;
char *g_end_exact;
char *g_end_mapped;
char **g_holder;

__attribute__((noinline)) static void setup(void) {
  char *a = malloc(32);
  g_end_slack = a + 32;
  char *b = malloc(24);
  g_end_exact = b + 24;
  char *c = malloc(MAPPED_SIZE);
  g_end_mapped = c + MAPPED_SIZE;
  /* An array's end held in another block: found by the graph, not the roots. */
  char *d = malloc(128);
  g_holder = malloc(2 * sizeof(char *));
  g_holder[0] = NULL;
  g_holder[1] = d + 128;
  void *lost = malloc(40); /* leaked */
  KEEP(lost);
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=40 end_slack=%p end_held=%p holder=%p", (void *)g_end_slack,
        (void *)g_holder[1], (void *)g_holder);
  wait_for_test();
  return 0;
}
