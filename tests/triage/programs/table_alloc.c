/* A small library's own allocation wrapper, as libdb has __os_malloc and
 * postfix mymalloc, and an entry point that allocates through it, as
 * db_create does: every block the library hands out comes through the
 * wrapper, so a suppression naming it, or the entry point, would set aside
 * every leak made through them. */
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

/* A 40-byte table starting with name. */
void *table_new(const char *name) {
  char *t = table_alloc(40);
  strncpy(t, name, 39);
  return t;
}
