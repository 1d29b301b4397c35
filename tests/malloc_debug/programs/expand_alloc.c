/* expand_alloc[=N]: every block has at least N extra usable bytes. */
#include <malloc.h>

#include "md.h"

int main(void) {
  size_t worst = SIZE_MAX;
  for (size_t n = 1; n < 5000; n += 13) {
    char *p = malloc(n);
    size_t extra = malloc_usable_size(p) - n;
    if (extra < worst) worst = extra;
    memset(p, 1, n + 16 < malloc_usable_size(p) ? n + 16 : malloc_usable_size(p));
    p = realloc(p, n + 50);
    extra = malloc_usable_size(p) - (n + 50);
    if (extra < worst) worst = extra;
    free(p);
  }
  say("min extra %zu\n", worst);
  return 0;
}
