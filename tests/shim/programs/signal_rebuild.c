/* A signal handler whose calls land while its own thread rebuilds a
 * registry shard's table, and which rebuilds another shard itself. The
 * handler's updates of the shard being rebuilt are put aside until the
 * rebuild is published; its own rebuild of the other shard must apply only
 * what was put aside for that one, and leave the thread's mark of the
 * outer rebuild as it found it.
 *
 * With backtraces on every block is in a shard, and in single-thread mode
 * (no second thread) nothing but that mark says the thread is rebuilding
 * one. The loop allocates blocks and keeps them, so the heap's shards grow
 * and are rebuilt, the larger ones over thousands of entries. A 10 kHz
 * timer interrupts it; when it lands in the shim's code while a shard is
 * due for its rebuild (more entries than 70% of its capacity, as registry.c
 * make_room says: true from the insert that asks for the rebuild until the
 * new table is published) and the last block the loop kept is in that
 * shard, the handler frees that block, allocates a block of 17 MiB (too big
 * for a size map: a shard of the mapping area, most often one with no table
 * yet, which it rebuilds), keeps it, and frees the block before. Once
 * argv[1] interruptions did so (or argv[2] seconds passed), the program
 * frees every block it allocated and prints "HITS n STALE s": s of the
 * blocks the handler freed that the registry still lists (a removal put
 * aside and then applied to the other shard's table, where it found
 * nothing; or one made in the old table after the rebuild had copied the
 * entry).
 *
 * argv[3] "many": the handler instead frees the last MANY blocks the loop
 * kept, when all lie in the shard due for its rebuild (blocks kept one
 * after another share their 1 MiB and so their shard), and allocates MANY
 * blocks of its own, which mostly land there too: more updates of the
 * shard than a short list of put-aside updates holds. It prints "HITS n
 * STALE s MISSING m": m of the blocks the handler kept that the registry
 * does not list. */
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

#include "shimtest.h"

#define BLOCK 48
#define MAX_BLOCKS (1 << 20)
#define BIG ((size_t)17 << 20)
#define MAX_HITS 64
#define MANY 80

static struct ur_thread_slot *mine;
static struct ur_shard *shards;
static uint32_t num_shards;
static uintptr_t text_lo, text_hi; /* the shim's code */
static void *blocks[MAX_BLOCKS];
static volatile long kept; /* blocks[0, kept) allocated by the loop */
static void *freed[MANY * MAX_HITS], *bigs[MAX_HITS], *made[MANY * MAX_HITS];
static volatile int hits, nfreed, nmade, many;

/* A shard due for its rebuild, or NULL. */
static const struct ur_shard *due(void) {
  for (uint32_t i = 0; i < num_shards; i++) {
    const struct ur_shard *s = &shards[i];
    if (s->capacity && s->count + s->tombstones + 1 > s->capacity * 7 / 10) return s;
  }
  return NULL;
}

static int in_table(const struct ur_shard *s, const void *p) {
  const struct ur_entry *t = (const struct ur_entry *)(uintptr_t)s->table;
  uint64_t key = UR_MANGLE(p);
  for (uint64_t i = 0; i < s->capacity; i++)
    if (t[i].key == key) return 1;
  return 0;
}

/* The index of the shard p's entry goes to (registry.h ur_shard_at). */
static long shard_index(const void *p) {
  return (long)((((uint64_t)(uintptr_t)p >> 20) * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
}

/* "many": the loop's last MANY blocks, all in s, freed; MANY blocks made. */
static void free_and_make_many(const struct ur_shard *s) {
  long k = kept;
  if (k < MANY) return;
  for (long i = k - MANY; i < k; i++)
    if (!blocks[i] || shard_index(blocks[i]) != s - shards) return;
  for (long i = k - MANY; i < k; i++) {
    free(blocks[i]);
    freed[nfreed++] = blocks[i];
    blocks[i] = NULL;
  }
  for (int i = 0; i < MANY; i++) made[nmade++] = malloc(BLOCK);
  hits++;
}

static void on_alarm(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  uintptr_t pc = (uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
  if (pc < text_lo || pc >= text_hi || hits == MAX_HITS || kept < 2) return;
  if (__atomic_load_n(&mine->op, __ATOMIC_RELAXED) == UR_OP_NONE) return;
  const struct ur_shard *s = due();
  if (many) {
    if (s) free_and_make_many(s);
    return;
  }
  long k = kept - 1;
  void *a = blocks[k], *b = blocks[k - 1];
  if (!s || !a || !b || !in_table(s, a) || !in_table(s, b)) return;
  blocks[k] = blocks[k - 1] = NULL;
  free(a);
  bigs[hits] = malloc(BIG);
  free(b);
  freed[nfreed++] = a;
  freed[nfreed++] = b;
  hits++;
}

int main(int argc, char **argv) {
  long want = argc > 1 ? atol(argv[1]) : 16;
  long seconds = argc > 2 ? atol(argv[2]) : 60;
  many = argc > 3 && strcmp(argv[3], "many") == 0;
  if (want > MAX_HITS) want = MAX_HITS;
  free(malloc(1)); /* attach this thread's slot */
  mine = my_slot();
  CHECK(mine != NULL);
  struct ur_descriptor *d = shim_desc();
  shards = (struct ur_shard *)(uintptr_t)d->shards;
  num_shards = d->num_shards;
  shim_text(&text_lo, &text_hi);
  CHECK(text_hi > text_lo);
  every_100us(on_alarm);
  time_t end = time(NULL) + seconds;
  while (hits < want && kept < MAX_BLOCKS && (kept & 0xfff || time(NULL) < end)) {
    void *p = malloc(BLOCK);
    CHECK(p != NULL);
    blocks[kept] = p;
    kept = kept + 1;
  }
  stop_timer();
  for (long i = 0; i < kept; i++) free(blocks[i]);
  for (int i = 0; i < hits; i++) free(bigs[i]);
  int stale = 0, missing = 0;
  for (int i = 0; i < nmade; i++) missing += made[i] && !registry_find(made[i], NULL, NULL);
  for (int i = 0; i < nmade; i++) free(made[i]); /* before: they reuse freed addresses */
  for (int i = 0; i < nfreed; i++) stale += registry_find(freed[i], NULL, NULL);
  if (many) printf("HITS %d STALE %d MISSING %d\n", hits, stale, missing);
  else printf("HITS %d STALE %d\n", hits, stale);
  return 0;
}
