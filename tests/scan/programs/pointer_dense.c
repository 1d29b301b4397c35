/* A heap dense in pointers, in random order: a server's caches (hash
 * buckets, tree and list nodes made in the order of the requests). COUNT
 * blocks of WORDS words each; every block's first word points to the next
 * block made (all are reachable from the first, which a global holds), the
 * other words to blocks picked at random. LEAKED more blocks are dropped.
 *   pointer_dense COUNT WORDS [LEAKED] */
#include "scenario.h"

static void **first;

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

int main(int argc, char **argv) {
  long count = argc > 1 ? atol(argv[1]) : 1000000;
  long words = argc > 2 ? atol(argv[2]) : 5;
  long leaked = argc > 3 ? atol(argv[3]) : 3;
  size_t size = 8 * (size_t)words;
  void ***blocks = malloc(sizeof(void **) * (size_t)count);
  if (!blocks) return 3;
  for (long i = 0; i < count; i++)
    if (!(blocks[i] = calloc(1, size))) return 3;
  uint64_t s = 88172645463325252ULL;
  for (long i = 0; i < count; i++) {
    blocks[i][0] = i + 1 < count ? (void *)blocks[i + 1] : NULL;
    for (long w = 1; w < words; w++) blocks[i][w] = blocks[next_random(&s) % (uint64_t)count];
  }
  first = (void **)blocks[0];
  free(blocks);
  for (long j = 0; j < leaked; j++) KEEP(malloc(size));
  wipe();
  ready("leak_count=%ld leak_bytes=%ld", leaked, leaked * (long)size);
  wait_for_test();
  KEEP(first);
  return 0;
}
