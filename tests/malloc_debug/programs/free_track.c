/* free_track[=N]: a freed block written to is reported when it leaves the
 * FIFO (or at exit), with the backtrace of its free; a damaged header tag;
 * a double free. */
#include "md.h"

__attribute__((noinline)) static void release(void *p) {
  free(p);
  KEEP(p);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  volatile unsigned char *p = malloc(100);
  say("ptr %p\n", (void *)p);
  release((void *)p);
  if (!strcmp(mode, "held")) {
    /* still ours: every byte is 0xef */
    size_t i = 0;
    while (i < 100 && p[i] == 0xef) i++;
    say("filled %zu\n", i);
  } else if (!strcmp(mode, "evict") || !strcmp(mode, "exit")) {
    p[20] = 0xaf;
    p[99] = 0x12;
  } else if (!strcmp(mode, "tag")) {
    /* guard (32) + header (32): the tag is 64 bytes before the pointer */
    *(volatile uint32_t *)(p - 64) = 0x1cc7dc00;
  } else if (!strcmp(mode, "double")) {
    release((void *)p);
  }
  if (strcmp(mode, "exit") != 0) {
    for (int i = 0; i < 4; i++) release(malloc(50)); /* push p out of a FIFO of 2 */
  }
  say("done\n");
  return 0;
}
