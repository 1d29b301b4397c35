/* The classic leak through a freed holder: a node points to a block, the
 * node is freed and the block forgotten. glibc's free writes only the
 * node's first 16 bytes (its tcache link and key): the pointer further in
 * stays in the free chunk. A thread meanwhile keeps writing a live block
 * on the same page, so a concurrent mark reads that page again in its
 * rounds and its stop: the stale word is in free memory, no root. */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "../../scan/programs/scenario.h"

struct node {
  void *tcache_next, *tcache_key; /* what free overwrites */
  void *payload;
  char rest[168];
};

static volatile uint64_t *g_live;

static void *writer(void *arg) {
  (void)arg;
  struct timespec pause = {0, 100000};
  for (uint64_t n = 0;; n++) {
    g_live[n % 8] = n;
    nanosleep(&pause, NULL);
  }
  return NULL;
}

__attribute__((noinline)) static void drop_holder(void) {
  struct node *holder = malloc(sizeof *holder);
  g_live = malloc(64); /* next to the holder, on its page */
  holder->payload = malloc(100);
  KEEP(holder->payload);
  free(holder);
}

int main(void) {
  drop_holder();
  wipe();
  pthread_t t;
  pthread_create(&t, NULL, writer, NULL);
  ready("leak_count=1 leak_bytes=100");
  wait_for_test();
  return 0;
}
