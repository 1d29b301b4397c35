/*
 * A program that overwrites the shim's registry in its own memory, as a
 * heap overflow or a hostile program could: the scanner reads it and must
 * neither trust its counts nor let it make the scanner's memory grow
 * without bound. argv[1] picks what is forged:
 *   shards N  N shards (a new array), every one naming the table of the
 *             fullest real shard: N times its entries for one table's bytes
 *   maps N    N size-map refs of distinct bases, every one naming the
 *             fullest real map
 *   tables N  the real shards and N more, each claiming a table of 2^32
 *             entries (64 GiB, mapped but never touched) of its own
 *   maplist N a size-map list claiming N refs (the shim makes 2^16), its
 *             first refs the real ones
 *   counts    every shard's count just under 2^32 (its tables as they are):
 *             2^40 allocations claimed for the scanner's memory estimate
 *   helper T  the helper's tid made T, a thread of another process: the
 *             scanner wakes the helper under ptrace, and must not seize T
 *   magic     the descriptor's magic changed (one bit)
 *   version   the descriptor's ABI version one past this shim's
 *   stacks    a stack table claiming 2^28 stacks of 4096 frames each
 *   threads   2^22 thread slots (256 MiB, mapped but never touched)
 *   regions   one more span of "the shim's memory" (never a root) over the
 *             page of this program's .data that holds `held`, the only
 *             pointer to a block: read as it is, the block is a leak
 * It keeps BLOCKS small blocks live, forges, prints READY and waits; it
 * allocates nothing after the forgery (the shim's own paths would read it).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "unreachable/abi.h"

#define BLOCKS 20000
/* The most entries a shard's table may claim (the shim's own limit). */
#define TABLE_ENTRIES (UINT64_C(1) << 32)

void *kept[BLOCKS]; /* not static: the compiler would drop the mallocs */
void *held = &held; /* in .data: a page of the program's file mapping */

static void *room(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  return p;
}

static void forge_shards(struct ur_descriptor *d, uint32_t n) {
  struct ur_shard *real = (struct ur_shard *)(uintptr_t)d->shards, *best = &real[0];
  for (uint32_t i = 1; i < d->num_shards; i++)
    if (real[i].count > best->count) best = &real[i];
  struct ur_shard *forged = room((size_t)n * sizeof(*forged));
  for (uint32_t i = 0; i < n; i++) {
    forged[i] = *best;
    forged[i].lock = 0;
  }
  d->shards = (uintptr_t)forged;
  d->num_shards = n;
}

static void forge_tables(struct ur_descriptor *d, uint32_t n) {
  uint32_t real = d->num_shards;
  struct ur_shard *shards = room((size_t)(real + n) * sizeof(*shards));
  memcpy(shards, (void *)(uintptr_t)d->shards, real * sizeof(*shards));
  size_t bytes = (size_t)TABLE_ENTRIES * sizeof(struct ur_entry);
  for (uint32_t i = real; i < real + n; i++) {
    void *t = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (t == MAP_FAILED) {
      perror("mmap");
      exit(1);
    }
    shards[i].table = (uintptr_t)t;
    shards[i].capacity = TABLE_ENTRIES;
  }
  d->shards = (uintptr_t)shards;
  d->num_shards = real + n;
}

static void forge_counts(struct ur_descriptor *d) {
  struct ur_shard *shards = (struct ur_shard *)(uintptr_t)d->shards;
  for (uint32_t i = 0; i < d->num_shards; i++) shards[i].count = TABLE_ENTRIES - 1;
}

static void forge_map_list(struct ur_descriptor *d, uint64_t n) {
  struct ur_size_maps *h = (struct ur_size_maps *)(uintptr_t)d->size_maps;
  /* Mapped but never touched past the real refs: zeros, no map. */
  struct ur_size_map_ref *refs = mmap(NULL, n * sizeof(*refs), PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (refs == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  memcpy(refs, (void *)(uintptr_t)h->refs, h->count * sizeof(*refs));
  h->refs = (uintptr_t)refs;
  h->capacity = h->count = n;
}

static void forge_maps(struct ur_descriptor *d, uint64_t n) {
  struct ur_size_maps *h = (struct ur_size_maps *)(uintptr_t)d->size_maps;
  if (!h || !h->count) {
    fprintf(stderr, "no size maps\n");
    exit(1);
  }
  struct ur_size_map_ref *real = (struct ur_size_map_ref *)(uintptr_t)h->refs;
  struct ur_size_map_ref *forged = room(n * sizeof(*forged));
  for (uint64_t i = 0; i < n; i++) {
    forged[i].base = real[0].base + (i << UR_SIZE_MAP_SPAN_SHIFT);
    forged[i].map = real[0].map;
  }
  h->refs = (uintptr_t)forged;
  h->capacity = h->count = n;
}

static void forge_stacks(struct ur_descriptor *d) {
  /* Mapped but never touched: reads as zeros, costs the target nothing. */
  uint32_t stacks = UINT32_C(1) << 28; /* 512 MiB of counts (2^32: 8 GiB) */
  size_t counts = (size_t)stacks * 2;
  struct ur_stack_table *st = room(sizeof(*st));
  uint64_t *frame_segs = room(UR_STACK_SEGMENTS * 8), *count_segs = room(UR_STACK_SEGMENTS * 8);
  char *all = mmap(NULL, counts, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  for (uint32_t k = 0; k <= ur_stack_segment(stacks - 1); k++) {
    frame_segs[k] = (uintptr_t)room(4096);
    count_segs[k] = (uintptr_t)(all + (size_t)ur_stack_segment_base(k) * 2);
  }
  st->frames = (uintptr_t)frame_segs;
  st->frame_counts = (uintptr_t)count_segs;
  st->capacity = stacks;
  st->count = stacks;
  st->max_frames = 4096;
  d->stacks = (uintptr_t)st;
}

static void forge_threads(struct ur_descriptor *d) {
  uint32_t slots = UINT32_C(1) << 22;
  d->threads = (uintptr_t)mmap(NULL, (size_t)slots * sizeof(struct ur_thread_slot), PROT_READ,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  d->max_threads = slots;
}

static void forge_regions(struct ur_descriptor *d) {
  uint64_t n = d->num_regions;
  struct ur_region_span *spans = room((n + 1) * sizeof(*spans));
  if (n) memcpy(spans, (void *)(uintptr_t)d->regions, n * sizeof(*spans));
  spans[n].begin = (uintptr_t)&held & ~(uintptr_t)4095;
  spans[n].end = spans[n].begin + 4096;
  d->regions = (uintptr_t)spans;
  d->num_regions = n + 1;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 0) : 0;
  for (int i = 0; i < BLOCKS; i++) kept[i] = malloc(32);
  kept[0] = NULL; /* one leak: its backtrace is read */
  held = malloc(64);
  struct ur_descriptor *d = dlsym(RTLD_DEFAULT, "unreachable_descriptor");
  if (!d) {
    fprintf(stderr, "no shim\n");
    return 1;
  }
  char ready[64];
  int len = snprintf(ready, sizeof(ready), "READY blocks=%d\n", BLOCKS);
  if (!strcmp(what, "shards"))
    forge_shards(d, (uint32_t)n);
  else if (!strcmp(what, "maps"))
    forge_maps(d, n);
  else if (!strcmp(what, "magic"))
    d->magic ^= 1;
  else if (!strcmp(what, "version"))
    d->version += 1;
  else if (!strcmp(what, "tables"))
    forge_tables(d, (uint32_t)n);
  else if (!strcmp(what, "counts"))
    forge_counts(d);
  else if (!strcmp(what, "helper")) {
    /* After the helper records its own tid, which would overwrite it. */
    while (!__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE)) usleep(1000);
    d->helper_tid = (uint32_t)n;
  }
  else if (!strcmp(what, "maplist"))
    forge_map_list(d, n);
  else if (!strcmp(what, "stacks"))
    forge_stacks(d);
  else if (!strcmp(what, "threads"))
    forge_threads(d);
  else if (!strcmp(what, "regions"))
    forge_regions(d);
  if (write(1, ready, (size_t)len) != len) return 1;
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
