/* A heap dense in pointers, in random order: a server's caches (hash
 * buckets, tree and list nodes made in the order of the requests). COUNT
 * blocks of WORDS words each; every block's first word points to the next
 * block made (all are reachable from the first, which a global holds), the
 * other words to blocks picked at random. LEAKED more blocks are dropped.
 * With `chain`, only the even blocks hold pointers: the first word to the
 * next even block of a random order (a list as deep as half the heap, laid
 * out at random), the others to the odd block after it and to odd blocks
 * picked at random, which hold none.
 *   pointer_dense COUNT WORDS [LEAKED [chain]] */
#include "scenario.h"

static void **first;

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* The even blocks linked in a random order (shuffled in place: blocks
 * keeps only what it is freed with), each pointing to its odd neighbour and
 * odd blocks at random. Returns the list's head. */
static void **chain(void ***blocks, long count, long words, uint64_t *s) {
  long links = count / 2;
  for (long i = 0; i < links; i++) {
    void **b = blocks[2 * i];
    b[1] = 2 * i + 1 < count ? (void *)blocks[2 * i + 1] : NULL;
    for (long w = 2; w < words; w++) b[w] = blocks[2 * (long)(next_random(s) % (uint64_t)links) + 1];
  }
  for (long i = links - 1; i > 0; i--) {
    long j = (long)(next_random(s) % (uint64_t)(i + 1));
    void **t = blocks[2 * i];
    blocks[2 * i] = blocks[2 * j];
    blocks[2 * j] = t;
  }
  for (long i = 0; i + 1 < links; i++) blocks[2 * i][0] = blocks[2 * (i + 1)];
  return links ? (void **)blocks[0] : NULL;
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
  if (argc > 4 && strcmp(argv[4], "chain") == 0) {
    first = chain(blocks, count, words, &s);
  } else {
    for (long i = 0; i < count; i++) {
      blocks[i][0] = i + 1 < count ? (void *)blocks[i + 1] : NULL;
      for (long w = 1; w < words; w++) blocks[i][w] = blocks[next_random(&s) % (uint64_t)count];
    }
    first = (void **)blocks[0];
  }
  free(blocks);
  for (long j = 0; j < leaked; j++) KEEP(malloc(size));
  wipe();
  ready("leak_count=%ld leak_bytes=%ld", leaked, leaked * (long)size);
  wait_for_test();
  KEEP(first);
  return 0;
}
