/* expand_alloc[=N]: every block has at least N extra bytes in glibc. The
 * program's malloc_usable_size answers the requested size (what a scan
 * reads), so ask glibc's own malloc_usable_size, looked up in libc itself:
 * without a header the user pointer is glibc's pointer. */
#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <malloc.h>

#include "md.h"

int main(void) {
  void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
  size_t (*glibc_usable)(void *) = libc ? (size_t (*)(void *))dlsym(libc, "malloc_usable_size") : NULL;
  if (!glibc_usable) return 2;
  size_t worst = SIZE_MAX;
  for (size_t n = 1; n < 5000; n += 13) {
    char *p = malloc(n);
    if (malloc_usable_size(p) != n) return 4;
    size_t extra = glibc_usable(p) - n;
    if (extra < worst) worst = extra;
    memset(p, 1, n);
    p = realloc(p, n + 50);
    extra = glibc_usable(p) - (n + 50);
    if (extra < worst) worst = extra;
    free(p);
  }
  say("min extra %zu\n", worst);
  return 0;
}
