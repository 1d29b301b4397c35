/* Pools the program maps right next to glibc's heap: the kernel merges
 * neighbouring anonymous mappings, so each pool and the heap show as one
 * mapping. Only the heap part of it may be left out of the roots: each pool
 * holds the only pointer to a block. Next to a chunk glibc mmap'ed for a
 * large block (below and above it), and below a thread arena's heap.
 * One block in each of those heaps is dropped. The program exits 1 when a
 * pool was not merged, so the case tested is always the one meant. */
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "scenario.h"

#define PAGE 4096
#define HEAP_MAX ((uintptr_t)64 << 20)

void *volatile kept[2]; /* the large block and the thread's block */
void *volatile tries[32];

/* flags: MAP_NORESERVE to match an arena's heap, which glibc reserves so
 * before 2.41 (a mapping merges only with one of the same flags). */
static void **pool_at(uintptr_t where, int flags) {
  void *p = mmap((void *)where, PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | flags, -1, 0);
  if (p != (void *)where) exit(1);
  return p;
}

/* Whether one line of /proc/self/maps covers both addresses. */
static int one_mapping(uintptr_t a, uintptr_t b) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int same = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi) same = lo <= b && b < hi;
  }
  if (f) fclose(f);
  return same;
}

static void *in_thread(void *arg) {
  (void)arg;
  void *block = malloc(100); /* from this thread's arena, not main_arena */
  uintptr_t heap = (uintptr_t)block & ~(HEAP_MAX - 1);
  void **pool = pool_at(heap - PAGE, MAP_NORESERVE);
  if (!one_mapping(heap - PAGE, (uintptr_t)block)) {
    munmap(pool, PAGE);
    pool = pool_at(heap - PAGE, 0);
  }
  pool[5] = malloc(40);
  KEEP(malloc(48)); /* dropped */
  if (!one_mapping(heap - PAGE, (uintptr_t)block)) exit(1);
  return block; /* the thread ends: its arena stays */
}

/* [begin, end) of the mapping glibc mmap'ed for a large block (rounded up
 * to a page: from 2.43 the chunk ends 16 bytes short of it). */
static uintptr_t chunk_end(void *block, uintptr_t *begin) {
  const volatile uintptr_t *header = (const volatile uintptr_t *)((uintptr_t)block - 16);
  *begin = (uintptr_t)header - header[0];
  return ((uintptr_t)header + (header[1] & ~(uintptr_t)7) + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
}

int main(void) {
  /* Two large blocks (above the mmap threshold: a chunk each) that the
   * kernel mapped next to each other (tried a few times: a gap higher up
   * may take the first); the upper one is freed. */
  void *big = NULL;
  uintptr_t chunk = 0, end = 0;
  for (int i = 0; i < 16 && !big; i++) {
    void *upper = malloc(1 << 20), *lower = malloc(1 << 20);
    uintptr_t upper_begin;
    chunk_end(upper, &upper_begin);
    end = chunk_end(lower, &chunk);
    if (end == upper_begin) {
      free(upper);
      big = lower;
    } else {
      tries[2 * i] = upper;
      tries[2 * i + 1] = lower;
    }
  }
  if (!big) return 1;
  /* pool <- big's chunk <- pool: one mapping */
  void **low = pool_at(chunk - PAGE, 0), **high = pool_at(end, 0);
  low[1] = malloc(24);
  high[2] = malloc(32);
  ((void **)big)[7] = malloc(56); /* kept by the large block, which is kept */
  kept[0] = big;
  KEEP(malloc(16)); /* dropped */
  if (!one_mapping(chunk - PAGE, end)) return 1;

  pthread_t t;
  void *thread_block;
  if (pthread_create(&t, NULL, in_thread, NULL) || pthread_join(t, &thread_block)) return 1;
  kept[1] = thread_block;
  wipe();
  ready("leak_count=2 leak_bytes=64 low=%p high=%p arena_pool=%p", (void *)low, (void *)high,
        (void *)(((uintptr_t)thread_block & ~(HEAP_MAX - 1)) - PAGE));
  wait_for_test();
  return 0;
}
