/* A small library's own allocation wrapper, as libdb has __os_malloc and
 * postfix mymalloc: every block the library hands out comes from here, so a
 * suppression naming it would set aside every leak made through it. */
#include <stdlib.h>
#include <string.h>

unsigned long table_alloc_calls;

void *table_alloc(size_t size) {
  char *p = malloc(size);
  if (p == NULL)
    abort();
  /* Work after the call, so that malloc is not a tail call and this
   * function stays in the backtrace. */
  memset(p, 0, size);
  table_alloc_calls++;
  return p;
}
