/* glibc's sysdeps/generic/malloc-size.h for x86-64 (MALLOC_ALIGNMENT 16).
 * Written for this project. */
#ifndef MALLOC_SIZE_H
#define MALLOC_SIZE_H

#include <stddef.h>

#define INTERNAL_SIZE_T size_t
#define SIZE_SZ (sizeof(INTERNAL_SIZE_T))
#define MALLOC_ALIGNMENT (2 * SIZE_SZ < __alignof__(long double) ? __alignof__(long double) : 2 * SIZE_SZ)
#define MALLOC_ALIGN_MASK (MALLOC_ALIGNMENT - 1)

#endif
