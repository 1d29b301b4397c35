/* A thread keeps replacing pages of its own (mmap, not malloc: roots, not
 * blocks); each holds the only pointer to a small block, which the new page
 * takes over before the old one is unmapped. A snapshot that lost an
 * unmapped page's bytes would see its small block unreachable: a leak
 * invented. The new pages never take the place of old ones for a while
 * (fresh addresses of a reservation, in turn): an old page's address holds
 * no page at all during a scan, as the live process shows it. Five blocks
 * are leaked. */
#include <pthread.h>
#include <sys/mman.h>

#include "../../scan/programs/scenario.h"

#define RING 8
#define PAGES 4096
#define SLOTS 65536

static void **ring[RING];
static char *reserved;
static unsigned next_slot;

static void **fresh_pages(void) {
  char *at = reserved + (size_t)(next_slot++ % SLOTS) * PAGES;
  return mmap(at, PAGES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

static void *replace(void *arg) {
  (void)arg;
  for (unsigned i = 0;; i = (i + 1) % RING) {
    void **fresh = fresh_pages();
    if (fresh == MAP_FAILED) continue;
    fresh[0] = ring[i][0];
    void **old = ring[i];
    ring[i] = fresh;
    munmap(old, PAGES);
  }
  return NULL;
}

int main(void) {
  reserved = mmap(NULL, (size_t)SLOTS * PAGES, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return 1;
  for (int i = 0; i < RING; i++) {
    ring[i] = fresh_pages();
    if (ring[i] == MAP_FAILED) return 1;
    ring[i][0] = malloc(64);
  }
  drop_five_leaks();
  wipe();
  pthread_t t;
  pthread_create(&t, NULL, replace, NULL);
  ready(FIVE_LEAKS);
  wait_for_test();
  return 0;
}
