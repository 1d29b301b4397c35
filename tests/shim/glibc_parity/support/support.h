/* The helpers of glibc's support/support.h that the vendored malloc tests
 * use. Written for this project. */
#ifndef SUPPORT_SUPPORT_H
#define SUPPORT_SUPPORT_H

#include <stddef.h>

void *xmalloc(size_t n) __attribute__((malloc, alloc_size(1)));
void *xcalloc(size_t n, size_t s) __attribute__((malloc, alloc_size(1, 2)));
void *xrealloc(void *p, size_t n) __attribute__((alloc_size(2)));
/* Memory shared with forked children (MAP_SHARED). */
void *support_shared_allocate(size_t size);
void support_shared_free(void *p);
/* Sends stderr to /dev/null (tests that expect glibc to abort). */
void ignore_stderr(void);
/* Writes a string with write(2) only: safe in signal handlers and forks. */
void write_message(const char *message);

#endif
