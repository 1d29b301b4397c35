#include "heap_shape.h"

#include <stdlib.h>
#include <string.h>

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

void *heap_shape_make(size_t n, size_t size, int list, uint64_t *pairs) {
  void ***blocks = malloc(n * sizeof(*blocks));
  size_t *order = malloc(n * sizeof(*order));
  void *root = NULL;
  if (!blocks || !order || n == 0 || size < 16) goto out;
  for (size_t i = 0; i < n; i++) {
    blocks[i] = malloc(size);
    if (!blocks[i]) goto out;
    memset(blocks[i], 0, size);
    pairs[2 * i] = (uint64_t)(uintptr_t)blocks[i];
    pairs[2 * i + 1] = size;
    order[i] = i;
  }
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = next_random(&seed) % (i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  size_t live = n - n / 10;
  for (size_t k = 0; k < n; k++) {
    if (list) {
      if (k + 1 < n && k + 1 != live) blocks[order[k]][0] = blocks[order[k + 1]];
      continue;
    }
    size_t base = k < live ? 0 : live, cnt = k < live ? live : n - live, j = k - base;
    for (size_t c = 0; c < 2; c++)
      if (2 * j + 1 + c < cnt) blocks[order[k]][c] = blocks[order[base + 2 * j + 1 + c]];
  }
  root = blocks[order[0]];
out:
  /* Keep no other references to the blocks. */
  free(blocks);
  free(order);
  return root;
}
