/* Blocks of 1 KiB, each filled with a pattern of its index and a
 * generation; threads keep rewriting whole blocks and checking what they
 * wrote, and count their rounds. A copy-on-write snapshot holds every page
 * they write until the scanner has saved it: whatever happens to the
 * scanner, the rounds must go on and no block may read back wrong. Five
 * blocks are leaked. */
#include <pthread.h>
#include <stdint.h>

#include "../../scan/programs/scenario.h"

#define WORDS (1024 / 8)
#define THREADS 2

static uint64_t **blocks;
static size_t nblocks;
static volatile uint64_t rounds, bad;

static void fill(uint64_t *b, size_t i, uint64_t gen) {
  for (size_t w = 0; w < WORDS; w++) b[w] = (i << 20) ^ (w << 8) ^ gen;
}

static void *rewrite(void *arg) {
  size_t id = (size_t)arg;
  uint64_t x = id * 2654435761u + 1;
  for (uint64_t gen = 1;; gen++) {
    x = x * 6364136223846793005u + 1442695040888963407u;
    size_t i = (size_t)(x >> 33) % nblocks;
    if (i % THREADS != id) continue; /* each block has one writer */
    fill(blocks[i], i, gen);
    for (size_t w = 0; w < WORDS; w++)
      if (blocks[i][w] != ((i << 20) ^ (w << 8) ^ gen)) __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rounds, 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

int main(int argc, char **argv) {
  nblocks = argc > 1 ? (size_t)atol(argv[1]) : 200000;
  blocks = malloc(nblocks * sizeof(*blocks));
  for (size_t i = 0; i < nblocks; i++) {
    blocks[i] = malloc(WORDS * 8);
    fill(blocks[i], i, 0);
  }
  drop_five_leaks();
  wipe();
  pthread_t t[THREADS];
  for (size_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, rewrite, (void *)i);
  ready(FIVE_LEAKS " rounds=%p bad=%p", (void *)&rounds, (void *)&bad);
  wait_for_test();
  return 0;
}
