/* Backtraces: get_malloc_leak_info records, malloc_backtrace, the stack
 * table as the scanner reads it, size filters and the toggle signal.
 * Built with -rdynamic so dladdr can name the allocation sites. */
#include <pthread.h>
#include <signal.h>

#include "shimtest.h"

static void *volatile sink;

__attribute__((noinline)) void *site_a(size_t n) {
  void *p = malloc(n);
  sink = p; /* not a tail call: our frame stays on the stack */
  return p;
}

__attribute__((noinline)) void *site_b(size_t n) {
  void *p = malloc(n);
  sink = p;
  return p;
}

static const char *fn_name(uintptr_t pc) {
  Dl_info info;
  if (!dladdr((void *)pc, &info) || !info.dli_sname) return "?";
  return info.dli_sname;
}

static int has_bt(void *p) {
  uint32_t id = 0;
  CHECK(registry_find(p, NULL, &id));
  return id != 0;
}

/* Leak info and malloc_backtrace against what we know we allocated. */
int check_full(void) {
  /* volatile trip counts: an unrolled loop would be several call sites */
  static volatile int five = 5, three = 3;
  void *a[5], *b[3];
  for (int i = 0; i < five; i++) a[i] = site_a(1234);
  for (int i = 0; i < three; i++) b[i] = site_b(777);

  uintptr_t frames[64];
  ssize_t n = SHIM_FN(malloc_backtrace)(a[0], frames, 64);
  CHECK(n >= 2);
  CHECK(strcmp(fn_name(frames[0]), "site_a") == 0); /* frame 0: malloc's caller */
  CHECK(strcmp(fn_name(frames[1]), "main") == 0 || strcmp(fn_name(frames[1]), "check_full") == 0);
  CHECK(SHIM_FN(malloc_backtrace)(b[0], frames, 1) == 1 &&
        strcmp(fn_name(frames[0]), "site_b") == 0);

  /* The stack table, read the scanner's way, says the same. */
  struct ur_descriptor *d = shim_desc();
  struct ur_stack_table *st = (struct ur_stack_table *)(uintptr_t)d->stacks;
  uint32_t id = 0;
  CHECK(registry_find(a[0], NULL, &id) && id >= 1 && id < st->count);
  CHECK(st->max_frames == 16 && st->capacity > 1);
  uint32_t seg = ur_stack_segment(id), off = id - ur_stack_segment_base(seg);
  uint16_t count = ((uint16_t *)(uintptr_t)((uint64_t *)(uintptr_t)st->frame_counts)[seg])[off];
  uint64_t *tf = (uint64_t *)(uintptr_t)((uint64_t *)(uintptr_t)st->frames)[seg] +
                 (uint64_t)off * st->max_frames;
  CHECK(count == n);
  CHECK(SHIM_FN(malloc_backtrace)(a[0], frames, 64) == n);
  for (int i = 0; i < count; i++) CHECK(tf[i] == frames[i]);
  uint32_t id2 = 0;
  CHECK(registry_find(a[4], NULL, &id2) && id2 == id); /* deduplicated */

  uint8_t *info;
  size_t overall, info_size, total, bt_size;
  SHIM_FN(get_malloc_leak_info)(&info, &overall, &info_size, &total, &bt_size);
  CHECK(info != NULL && bt_size == 16 && info_size == (2 + 16) * sizeof(uintptr_t));
  CHECK(overall > 0 && overall % info_size == 0 && total >= 5 * 1234 + 3 * 777);
  int seen_a = 0, seen_b = 0;
  for (size_t off = 0; off < overall; off += info_size) {
    size_t *rec = (size_t *)(info + off);
    uintptr_t *pcs = (uintptr_t *)&rec[2];
    size_t k = 0;
    while (k < bt_size && pcs[k]) k++;
    for (size_t j = k; j < bt_size; j++) CHECK(pcs[j] == 0); /* zero-filled tail */
    if (rec[0] == 1234 && k && strcmp(fn_name(pcs[0]), "site_a") == 0) {
      CHECK(rec[1] == 5 && k == (size_t)n);
      for (size_t j = 0; j < k; j++) CHECK(pcs[j] == frames[j]);
      seen_a++;
    }
    if (rec[0] == 777 && k && strcmp(fn_name(pcs[0]), "site_b") == 0) {
      CHECK(rec[1] == 3);
      seen_b++;
    }
  }
  CHECK(seen_a == 1 && seen_b == 1); /* merged into one record each */
  SHIM_FN(free_malloc_leak_info)(info);
  for (int i = 0; i < 5; i++) free(a[i]);
  for (int i = 0; i < 3; i++) free(b[i]);
  return 0;
}

static int check_none(void) {
  void *a = site_a(1234);
  uintptr_t frames[8];
  CHECK(SHIM_FN(malloc_backtrace)(a, frames, 8) == 0);
  CHECK(!has_bt(a));
  uint8_t *info = (uint8_t *)1;
  size_t overall = 1, info_size = 1, total = 1, bt_size = 1;
  SHIM_FN(get_malloc_leak_info)(&info, &overall, &info_size, &total, &bt_size);
  CHECK(info == NULL && overall == 0 && info_size == 0 && total == 0 && bt_size == 0);
  struct ur_stack_table *st = (struct ur_stack_table *)(uintptr_t)shim_desc()->stacks;
  CHECK(st->max_frames == 0 && st->count == 1);
  free(a);
  return 0;
}

/* Prints which sizes got a backtrace, e.g. "777:0 1234:1 3000:0". */
static int sizes(void) {
  size_t s[] = {777, 1234, 3000};
  for (int i = 0; i < 3; i++) {
    void *p = site_a(s[i]);
    printf("%s%zu:%d", i ? " " : "", s[i], has_bt(p));
  }
  printf("\n");
  return 0;
}

/* Prints capture state before, after one and after two toggle signals. */
static int toggle(void) {
  for (int i = 0; i < 3; i++) {
    if (i) raise(SIGRTMAX - 19);
    printf("%s%d", i ? " " : "", has_bt(site_a(100)));
  }
  printf("\n");
  return 0;
}

/* Whether a size map covers a's MiB (the refs list, as readers see it). */
static int map_covers(uint64_t a) {
  const struct ur_size_maps *m = (const struct ur_size_maps *)(uintptr_t)shim_desc()->size_maps;
  if (!m || !m->refs) return 0;
  const struct ur_size_map_ref *refs = (const struct ur_size_map_ref *)(uintptr_t)m->refs;
  for (uint64_t i = 0; i < m->count; i++)
    if (refs[i].base == (a & ~((UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT) - 1))) return 1;
  return 0;
}

/* A small block kept in a shard (it has a backtrace), in a MiB whose size
 * map is made after it (by a block without one): free finds the map, and
 * glibc's chunk header says the block's size is a level-0 one, yet the
 * block is not in the map and must leave its shard. Blocks of 60 KiB (no
 * backtrace, each making the map of the MiB it begins in) move the top of
 * a fresh arena on until a small block lands in a MiB no map covers. */
static void *late_map_thread(void *arg) {
  (void)arg;
  enum { TRIES = 64 };
  char *spacers[TRIES], *kept[TRIES], *a = NULL;
  int n = 0;
  for (; n < TRIES; n++) {
    a = site_a(150); /* backtrace: a shard */
    CHECK(has_bt(a) && shard_entry((uint64_t)(uintptr_t)a));
    if (!map_covers((uint64_t)(uintptr_t)a)) break;
    kept[n] = a;
    spacers[n] = malloc(60 << 10);
  }
  CHECK(n < TRIES);
  char *b = site_a(50); /* below backtrace_min_size: a size map, made now */
  CHECK(((uintptr_t)a >> UR_SIZE_MAP_SPAN_SHIFT) == ((uintptr_t)b >> UR_SIZE_MAP_SPAN_SHIFT));
  CHECK(map_covers((uint64_t)(uintptr_t)a) && size_map_entry((uint64_t)(uintptr_t)b, NULL));
  free(a);
  CHECK(!registry_find(a, NULL, NULL)); /* gone from its shard too */
  CHECK(registered_with_size(b, 50));
  free(b);
  CHECK(!registry_find(b, NULL, NULL));
  for (int i = 0; i < n; i++) {
    free(kept[i]);
    free(spacers[i]);
    CHECK(!registry_find(kept[i], NULL, NULL));
  }
  return NULL;
}

static int late_map(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, late_map_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  return 0;
}

int main(int argc, char **argv) {
  CHECK(argc == 2);
  if (!strcmp(argv[1], "full")) return check_full();
  if (!strcmp(argv[1], "none")) return check_none();
  if (!strcmp(argv[1], "sizes")) return sizes();
  if (!strcmp(argv[1], "toggle")) return toggle();
  if (!strcmp(argv[1], "late_map")) return late_map();
  return 2;
}
