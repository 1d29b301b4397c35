/* fill_on_alloc / fill_on_free / fill (MAX_FILLED_BYTES): print how many
 * leading bytes hold the fill value. */
#include <malloc.h>

#include "md.h"

static size_t run_of(const unsigned char *p, size_t n, unsigned char v) {
  size_t i = 0;
  while (i < n && p[i] == v) i++;
  return i;
}

int main(void) {
  unsigned char *p = malloc(100);
  size_t usable = malloc_usable_size(p);
  say("alloc %zu of %zu\n", run_of(p, usable, 0xeb), usable);
  unsigned char *c = calloc(10, 10);
  say("calloc zero %zu\n", run_of(c, 100, 0x00));
  memset(p, 0x11, usable);
  p = realloc(p, 1000); /* moves: bytes above the old usable size are 0xeb */
  size_t big = malloc_usable_size(p);
  say("realloc old %zu new %zu of %zu\n", run_of(p, big, 0x11),
      run_of(p + usable, big - usable, 0xeb), big - usable);
  free(c);
  /* fill_on_free: glibc reuses the first 16 bytes of a freed chunk for its
   * lists, so look from byte 16 on (free_track would keep them intact). */
  unsigned char *q = malloc(200);
  size_t qu = malloc_usable_size(q);
  free(q);
  say("free %zu of %zu\n", run_of(q + 16, qu - 16, 0xef), qu - 16);
  free(p);
  return 0;
}
