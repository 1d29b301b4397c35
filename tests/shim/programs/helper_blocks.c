/* The blocks glibc allocates for the shim's helper thread (its DTV) are in
 * the registry, as glibc has them, but not the program's: malloc_iterate
 * leaves them out. When the helper steps aside (unshare of a user
 * namespace) and a new one starts, the old DTV leaves the registry with
 * glibc's free. Prints SKIP if user namespaces are not allowed here. */
#include <errno.h>
#include <sched.h>

#include "shimtest.h"

#define MAX 100000
static uint64_t reg[MAX], iter[MAX];
static size_t nreg, niter;

static void add_iter(uintptr_t p, size_t size, void *arg) {
  (void)size;
  (void)arg;
  if (niter < MAX) iter[niter++] = p;
}

/* Every registered address, read as the scanner reads them. */
static void walk_registry(void) {
  struct ur_descriptor *d = shim_desc();
  nreg = 0;
  const struct ur_size_maps *m = (const struct ur_size_maps *)(uintptr_t)d->size_maps;
  if (m && m->refs) {
    const struct ur_size_map_ref *refs = (const struct ur_size_map_ref *)(uintptr_t)m->refs;
    for (uint64_t i = 0; i < m->count; i++) {
      uint64_t base = refs[i].base;
      const uint8_t *map = (const uint8_t *)(uintptr_t)refs[i].map;
      const uint16_t *l1 = (const uint16_t *)(const void *)(map + UR_SIZE_MAP_L1_OFFSET);
      const uint32_t *l2 = (const uint32_t *)(const void *)(map + UR_SIZE_MAP_L2_OFFSET);
      for (uint32_t j = 0; j < UR_SIZE_MAP_L0_ENTRIES; j++)
        if (map[j] && nreg < MAX) reg[nreg++] = ur_size_map_l0_block(base, j);
      for (uint32_t j = 0; j < UR_SIZE_MAP_L1_ENTRIES; j++)
        if (l1[j] && nreg < MAX) reg[nreg++] = ur_size_map_l1_block(base, j, l1[j]);
      for (uint32_t j = 0; j < UR_SIZE_MAP_L2_ENTRIES; j++)
        if (l2[j] && nreg < MAX) reg[nreg++] = ur_size_map_l2_block(base, j, l2[j]);
    }
  }
  struct ur_shard *shards = (struct ur_shard *)(uintptr_t)d->shards;
  for (uint32_t i = 0; i < d->num_shards; i++) {
    const struct ur_entry *t = (const struct ur_entry *)(uintptr_t)shards[i].table;
    for (uint64_t j = 0; j < shards[i].capacity; j++)
      if (t[j].key != UR_KEY_EMPTY && t[j].key != UR_KEY_TOMBSTONE && nreg < MAX)
        reg[nreg++] = UR_UNMANGLE(t[j].key);
  }
}

/* The registered blocks malloc_iterate does not hand out: the shim's own. */
static size_t own_blocks(uint64_t *out, size_t max) {
  int (*iterate)(uintptr_t, size_t, void (*)(uintptr_t, size_t, void *), void *) =
      shim_sym("malloc_iterate");
  void (*disable)(void) = shim_sym("malloc_disable");
  void (*enable)(void) = shim_sym("malloc_enable");
  niter = 0;
  CHECK(iterate(0, UINTPTR_MAX, add_iter, NULL) == 0);
  disable();
  walk_registry();
  enable();
  size_t n = 0;
  for (size_t i = 0; i < nreg; i++) {
    int seen = 0;
    for (size_t j = 0; j < niter && !seen; j++) seen = iter[j] == reg[i];
    if (!seen && n < max) out[n++] = reg[i];
  }
  return n;
}

static uint32_t wait_helper(struct ur_descriptor *d) {
  for (int i = 0; i < 100000 && !__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE); i++) usleep(100);
  return __atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE);
}

int main(void) {
  struct ur_descriptor *d = shim_desc();
  uint32_t first = wait_helper(d);
  CHECK(first != 0);
  uint64_t before[8], after[8];
  size_t nb = own_blocks(before, 8);
  if (nb != 1) {
    printf("%zu blocks of the helper's before the step aside\n", nb);
    return 1;
  }
  if (unshare(CLONE_NEWUSER) != 0) {
    printf("SKIP %s\n", strerror(errno));
    return 0;
  }
  uint32_t second = wait_helper(d);
  CHECK(second != 0 && second != first);
  size_t na = own_blocks(after, 8);
  if (na != 1) {
    printf("%zu blocks of the helper's after the step aside\n", na);
    return 1;
  }
  if (before[0] != after[0]) {
    for (size_t i = 0; i < nreg; i++)
      if (reg[i] == before[0]) {
        printf("the first helper's DTV is still registered\n");
        return 1;
      }
  }
  printf("OK\n");
  return 0;
}
