/*
 * A program without the shim whose heap an overflow damaged, for a scan
 * that walks glibc's chunks (docs/glibc-heap.md). argv[1]:
 *   size-huge   the chunk after a block gets a size reaching past its heap
 *   size-zero   that chunk's size is 0 (a walk by sizes that never moves)
 *   tcache-loop a freed block's tcache link names itself (a list that loops)
 *   tcache-stack a freed block's tcache link names this thread's stack
 * Prints READY and waits; it calls malloc no more after the damage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *kept[64]; /* not static: the compiler would drop the mallocs */

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  for (int i = 0; i < 64; i++) kept[i] = malloc(40);
  uint64_t *victim = kept[10];
  uint64_t on_stack[8] = {0};
  printf("READY stack=%p\n", (void *)on_stack);
  fflush(stdout);
  if (!strcmp(what, "size-huge")) {
    victim[-1] = (UINT64_C(1) << 40) | 1; /* the size word of kept[10]'s chunk */
  } else if (!strcmp(what, "size-zero")) {
    victim[-1] = 0;
  } else if (!strcmp(what, "tcache-loop") || !strcmp(what, "tcache-stack")) {
    free(kept[20]);
    uint64_t *freed = kept[20];
    /* glibc >= 2.32 mangles the link with the entry's address >> 12. */
    uint64_t to = !strcmp(what, "tcache-loop") ? (uint64_t)(uintptr_t)freed
                                               : (uint64_t)(uintptr_t)on_stack;
    freed[0] = to ^ ((uint64_t)(uintptr_t)freed >> 12);
    kept[20] = NULL;
  }
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return (int)on_stack[0];
}
