#include "leak_dedup.h"

#include <errno.h>
#include <stdlib.h>

/* One entry per backtrace, found by stack id through an open-addressing
 * table: there are as many as distinct backtraces, not leaks. */
struct groups {
  struct ur_dedup_leak *items;
  size_t len, cap;
  size_t *slots; /* index into items + 1; 0: empty */
  size_t mask;
};

static size_t home(uint64_t stack_id, size_t mask) {
  return (size_t)((stack_id * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & mask;
}

static size_t *slot_of(const struct groups *g, uint64_t stack_id) {
  for (size_t i = home(stack_id, g->mask);; i = (i + 1) & g->mask)
    if (!g->slots[i] || g->items[g->slots[i] - 1].stack_id == stack_id) return &g->slots[i];
}

/* Room for one more group: items grown, slots kept at most half full. */
static int reserve(struct groups *g) {
  if (g->len == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 64;
    struct ur_dedup_leak *items = realloc(g->items, cap * sizeof(*items));
    if (!items) return -ENOMEM;
    g->items = items;
    g->cap = cap;
  }
  if (g->slots && 2 * (g->len + 1) <= g->mask + 1) return 0;
  size_t nslots = g->slots ? 2 * (g->mask + 1) : 128;
  size_t *old = g->slots;
  g->slots = calloc(nslots, sizeof(*g->slots));
  if (!g->slots) {
    g->slots = old;
    return -ENOMEM;
  }
  g->mask = nslots - 1;
  free(old);
  for (size_t k = 0; k < g->len; k++) *slot_of(g, g->items[k].stack_id) = k + 1;
  return 0;
}

static struct ur_dedup_leak entry(const struct ur_leak_record *r) {
  return (struct ur_dedup_leak){.begin = r->begin,
                                .size = r->size,
                                .stack_id = r->stack_id,
                                .referenced_count = r->referenced_count,
                                .referenced_size = r->referenced_size};
}

/* Leaks come in address order: the first of a backtrace is its entry. */
static int group(struct groups *g, const struct ur_leak_record *r) {
  if (!g->slots && reserve(g)) return -ENOMEM;
  size_t *s = slot_of(g, r->stack_id);
  if (*s) {
    struct ur_dedup_leak *first = &g->items[*s - 1];
    first->similar_count++;
    first->similar_size += r->size;
    first->similar_referenced_count += r->referenced_count;
    first->similar_referenced_size += r->referenced_size;
    return 0;
  }
  if (reserve(g)) return -ENOMEM;
  g->items[g->len] = entry(r);
  *slot_of(g, r->stack_id) = ++g->len;
  return 0;
}

/* Whether a comes before b in the report: larger total, then lower address. */
static int before(const struct ur_dedup_leak *a, const struct ur_dedup_leak *b) {
  uint64_t ta = ur_dedup_total(a), tb = ur_dedup_total(b);
  return ta != tb ? ta > tb : a->begin < b->begin;
}

static int compare(const void *a, const void *b) {
  return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* The `cap` entries that come first, kept in a heap whose root is the one
 * that comes last: one comparison for most of a million leaks. */
struct best {
  struct ur_dedup_leak *heap;
  size_t len, cap;
};

static void swap(struct ur_dedup_leak *a, struct ur_dedup_leak *b) {
  struct ur_dedup_leak t = *a;
  *a = *b;
  *b = t;
}

static void offer(struct best *b, const struct ur_dedup_leak *x) {
  struct ur_dedup_leak *h = b->heap;
  if (b->len < b->cap) {
    size_t i = b->len++;
    h[i] = *x;
    for (; i && before(&h[(i - 1) / 2], &h[i]); i = (i - 1) / 2) swap(&h[i], &h[(i - 1) / 2]);
    return;
  }
  if (!b->cap || !before(x, &h[0])) return;
  h[0] = *x;
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, last = i;
    if (l < b->len && before(&h[last], &h[l])) last = l;
    if (r < b->len && before(&h[last], &h[r])) last = r;
    if (last == i) break;
    swap(&h[i], &h[last]);
    i = last;
  }
}

ssize_t ur_leak_dedup(const struct ur_leak_record *leaks, size_t n, size_t limit,
                      struct ur_dedup_leak **out) {
  *out = NULL;
  if (!limit || !n) return 0;
  struct groups g = {0};
  size_t plain = 0;
  ssize_t rc = -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    if (!leaks[i].stack_id) plain++;
    else if (group(&g, &leaks[i])) goto done;
  }
  struct best b = {.cap = g.len + plain < limit ? g.len + plain : limit};
  if (!(b.heap = malloc(b.cap * sizeof(*b.heap)))) goto done;
  for (size_t k = 0; k < g.len; k++) offer(&b, &g.items[k]);
  for (size_t i = 0; i < n; i++)
    if (!leaks[i].stack_id) {
      struct ur_dedup_leak e = entry(&leaks[i]);
      offer(&b, &e);
    }
  qsort(b.heap, b.len, sizeof(*b.heap), compare);
  *out = b.heap;
  rc = (ssize_t)b.len;
done:
  free(g.items);
  free(g.slots);
  return rc;
}
