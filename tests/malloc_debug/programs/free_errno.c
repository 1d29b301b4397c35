/* free and malloc_usable_size keep errno (glibc since 2.33; POSIX 2024 for
 * free), whatever the options do inside them: prints the first call after
 * which errno was not the value set before it, or "errno kept". */
#include <errno.h>
#include <malloc.h>

#include "md.h"

int main(void) {
  enum { N = 2000 };
  static void *blocks[N];
  for (int i = 0; i < N; i++) blocks[i] = malloc((size_t)(i % 300) * 37 + 1);
  for (int i = 0; i < N; i++) {
    errno = 1234;
    size_t u = malloc_usable_size(blocks[i]);
    KEEP(u);
    if (errno != 1234) {
      say("malloc_usable_size %d errno %d\n", i, errno);
      return 1;
    }
    errno = 1234;
    free(blocks[i]);
    if (errno != 1234) {
      say("free %d errno %d\n", i, errno);
      return 1;
    }
  }
  errno = 1234;
  free(malloc(10));
  void *p = malloc(100);
  errno = 1234;
  p = realloc(p, 0); /* frees */
  if (errno != 1234) {
    say("realloc(p, 0) errno %d\n", errno);
    return 1;
  }
  say("errno kept\n");
  return 0;
}
