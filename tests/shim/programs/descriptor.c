/* The exported descriptor, read in-process: header fields, addresses inside
 * the region, the option string, and the snapshot helper answering a command. */
#include <linux/futex.h>
#include <sys/syscall.h>

#include "shimtest.h"

/* The count is read after the address: another thread (the helper) may be
 * adding a piece and putting something in it meanwhile. */
static int in_spans(const struct ur_descriptor *d, uint64_t a) {
  const struct ur_region_span *spans = (const struct ur_region_span *)(uintptr_t)d->regions;
  uint64_t n = __atomic_load_n(&d->num_regions, __ATOMIC_ACQUIRE);
  for (uint64_t i = 0; i < n; i++)
    if (a >= spans[i].begin && a < spans[i].end) return 1;
  return 0;
}

int main(int argc, char **argv) {
  struct ur_descriptor *d = shim_desc();
  const char *want = argc > 1 ? argv[1] : "";
  CHECK(d->magic == UR_ABI_MAGIC && d->version == UR_ABI_VERSION);
  CHECK(d->size == sizeof(struct ur_descriptor));
  CHECK(d->pid == (uint64_t)getpid());
  CHECK(d->options && strcmp((const char *)(uintptr_t)d->options, want) == 0);
  CHECK(d->region_begin && d->region_end > d->region_begin);
  /* The shim's memory: pieces, the first of them region_begin/end. */
  const struct ur_region_span *spans = (const struct ur_region_span *)(uintptr_t)d->regions;
  CHECK(spans && d->num_regions >= 1 && d->num_regions <= UR_MAX_REGIONS);
  CHECK(spans[0].begin == d->region_begin && spans[0].end == d->region_end);
  for (uint64_t i = 0; i < d->num_regions; i++) CHECK(spans[i].end > spans[i].begin);
#define IN_REGION(a) in_spans(d, a)
  CHECK(IN_REGION(d->options));
  if (argc > 2 && !strcmp(argv[2], "inert")) {
    CHECK(d->enabled == 0 && d->disabled == UR_DISABLED_OPTIONS);
    /* everything still works, straight through glibc, untracked */
    void *p = malloc(10);
    CHECK(p && !registry_find(p, NULL, NULL));
    free(p);
    printf("OK inert\n");
    return 0;
  }
  CHECK(d->enabled == 1 && d->disabled == UR_DISABLED_NONE && d->unregistered == 0);
  CHECK(d->num_shards == 256 && d->max_threads > 0);
  CHECK(IN_REGION(d->shards) && IN_REGION(d->threads) && IN_REGION(d->stacks) &&
        IN_REGION(d->helper_cmd));
  /* A block of our own: the shim's helper thread (its TLS) is not
   * registered, so before main there may be nothing live at all. */
  void *volatile mine = malloc(16); /* volatile: gcc drops a malloc/free pair */
  struct ur_shard *sh = (struct ur_shard *)(uintptr_t)d->shards;
  uint64_t live = 0;
  for (uint32_t i = 0; i < d->num_shards; i++) {
    CHECK(sh[i].lock == 0 && sh[i].owner_tid == 0);
    CHECK(sh[i].capacity == 0 || ((sh[i].capacity & (sh[i].capacity - 1)) == 0 &&
                                  IN_REGION(sh[i].table)));
    CHECK(sh[i].count + sh[i].tombstones <= sh[i].capacity);
    live += sh[i].count;
  }
  /* A 16-byte block with no backtrace lives in a size map, not a shard. */
  CHECK(IN_REGION(d->size_maps));
  const struct ur_size_maps *maps = (const struct ur_size_maps *)(uintptr_t)d->size_maps;
  /* (none with backtraces on from the start: every block has a stack id) */
  CHECK(maps->count <= maps->capacity && (maps->count == 0 || IN_REGION(maps->refs)));
  const struct ur_size_map_ref *refs = (const struct ur_size_map_ref *)(uintptr_t)maps->refs;
  for (uint64_t i = 0; i < maps->count; i++) {
    /* page aligned, so that its pages can be given back (give_back.c) */
    CHECK(IN_REGION(refs[i].map) && refs[i].map % 4096 == 0 &&
          refs[i].base % (UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT) == 0);
    for (uint64_t j = 0; j < i; j++) CHECK(refs[j].base != refs[i].base);
  }
  uint64_t size;
  uint32_t id;
  CHECK(registry_find(mine, &size, &id) && size == 16);
  int in_map = size_map_entry((uint64_t)(uintptr_t)mine, &size);
  if (id == 0) CHECK(in_map && size == 16 && !shard_entry((uint64_t)(uintptr_t)mine));
  else CHECK(!in_map && shard_entry((uint64_t)(uintptr_t)mine)); /* a backtrace: a shard's */
  /* So is a bigger one. */
  void *volatile big = malloc(40000);
  CHECK(registry_find(big, &size, &id) && size == 40000);
  if (id == 0) CHECK(size_map_entry((uint64_t)(uintptr_t)big, &size) && size == 40000);
  free(big);
  CHECK(!registry_find(big, NULL, NULL));
  CHECK(live + maps->count > 0);
  free(mine);
  CHECK(!size_map_entry((uint64_t)(uintptr_t)mine, NULL));
  struct ur_stack_table *st = (struct ur_stack_table *)(uintptr_t)d->stacks;
  CHECK(st->count >= 1 && st->overflowed == 0);

  /* The helper: named, and it runs a snapshot command back to idle. */
  for (int i = 0; i < 2000 && !__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE); i++)
    usleep(1000);
  CHECK(d->helper_tid != 0 && d->helper_tid != (uint32_t)getpid());
  char path[64], comm[32] = {0};
  snprintf(path, sizeof path, "/proc/self/task/%u/comm", d->helper_tid);
  FILE *f = fopen(path, "r");
  CHECK(f && fgets(comm, sizeof comm, f));
  fclose(f);
  CHECK(strcmp(comm, "ur-helper\n") == 0);
  uint32_t *cmd = (uint32_t *)(uintptr_t)d->helper_cmd;
  CHECK(*cmd == UR_CMD_IDLE);
  for (int round = 0; round < 3; round++) {
    __atomic_store_n(cmd, UR_CMD_SNAPSHOT, __ATOMIC_RELEASE);
    syscall(SYS_futex, cmd, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    for (int i = 0; i < 5000 && __atomic_load_n(cmd, __ATOMIC_ACQUIRE) != UR_CMD_IDLE; i++)
      usleep(1000);
    CHECK(*cmd == UR_CMD_IDLE);
  }
  printf("OK\n");
  return 0;
}
