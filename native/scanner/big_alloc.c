#include "big_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HEADER 64
#define MMAP_MIN ((size_t)4 << 20)

void *ur_big_reserve(size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return NULL;
  madvise(p, len, MADV_HUGEPAGE); /* advisory: ignore failure */
  return p;
}

void ur_big_release(void *p, size_t len) {
  if (p) munmap(p, len);
}

void *ur_big_calloc(size_t n, size_t size) {
  if (size && n > (SIZE_MAX - HEADER) / size) return NULL;
  size_t bytes = n * size;
  if (bytes < MMAP_MIN) {
    uint8_t *p = calloc(1, bytes + HEADER);
    if (!p) return NULL;
    *(size_t *)p = 0;
    return p + HEADER;
  }
  size_t len = bytes + HEADER;
  uint8_t *p = ur_big_reserve(len);
  if (!p) return NULL;
  *(size_t *)p = len;
  return p + HEADER;
}

void ur_big_free(void *q) {
  if (!q) return;
  uint8_t *p = (uint8_t *)q - HEADER;
  size_t len = *(size_t *)p;
  if (len) munmap(p, len);
  else free(p);
}
