/* front_guard / rear_guard / guard: corrupt a guard and free (or realloc);
 * "align" checks every entry point keeps alignment and contents. */
#include <malloc.h>

#include "md.h"

static int check_aligned(void) {
  void *p;
  for (size_t n = 0; n < 300; n += 7) {
    p = malloc(n);
    if ((uintptr_t)p % 16) return 1;
    free(p);
    p = calloc(1, n);
    for (size_t i = 0; i < n; i++)
      if (((unsigned char *)p)[i]) return 2;
    free(p);
  }
  size_t aligns[] = {16, 32, 64, 256, 4096};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    p = memalign(aligns[i], 100);
    if ((uintptr_t)p % aligns[i]) return 3;
    free(p);
    if (posix_memalign(&p, aligns[i], 33) || (uintptr_t)p % aligns[i]) return 4;
    free(p);
    p = aligned_alloc(aligns[i], 64);
    if ((uintptr_t)p % aligns[i]) return 5;
    free(p);
  }
  p = valloc(10);
  if ((uintptr_t)p % 4096) return 6;
  free(p);
  char *s = malloc(10);
  memcpy(s, "abcdefghi", 10);
  s = realloc(s, 5000);
  if ((uintptr_t)s % 16 || memcmp(s, "abcdefghi", 10)) return 7;
  s = realloc(s, 3);
  if (memcmp(s, "abc", 3)) return 8;
  free(s);
  p = malloc(100);
  say("usable %zu\n", malloc_usable_size(p));
  free(p);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "align")) {
    int rc = check_aligned();
    say("align %d\n", rc);
    return rc;
  }
  /* volatile: stores right before free() are otherwise dead to the compiler */
  volatile unsigned char *p = malloc(100);
  say("ptr %p\n", (void *)p);
  if (!strcmp(mode, "front")) {
    p[-32] = 0x00;
    p[-15] = 0x02;
    free((void *)p);
  } else if (!strcmp(mode, "rear")) {
    p[100] = 0xbf;
    p[101] = 0x00;
    free((void *)p);
  } else if (!strcmp(mode, "realloc")) {
    p[103] = 0x01;
    p = realloc((void *)p, 200); /* reported here; the block still moves */
    free((void *)p);
  } else {
    free((void *)p); /* clean */
  }
  say("done\n");
  return 0;
}
