/* realloc of a block already freed: glibc 2.36 gives a block back (often
 * the same one, still in its tcache), and the program uses it; the registry
 * must know that block, as glibc has it live. */
#include "shimtest.h"

int main(void) {
  void *volatile q = malloc(32);
  CHECK(q);
  free(q);
  char *p = realloc(q, 64);
  CHECK(p);
  memset(p, 1, 64);
  CHECK(registered_with_size(p, 64));
  printf("OK\n"); /* p is not freed: glibc may have it in its tcache twice */
  return 0;
}
