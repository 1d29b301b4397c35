#include "page_sync.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "unreachable/linux_compat.h"

#define CATEGORIES (PAGE_IS_WPALLOWED | PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_SWAPPED)
#define VEC 512

enum action { KEEP, READ, ZERO };

/* A run of pages to read, inside one chunk. */
struct read_run {
  struct ur_chunk *chunk;
  uint64_t addr, len;
};

struct plan {
  struct ur_pread_mem *m;
  int held; /* the range being planned is UR_SYNC_HELD */
  struct read_run *runs;
  size_t nruns, cap;
  struct ur_sync_stats *st;
  uint64_t *seen; /* refreshing: the pages of this sync's ranges, per chunk */
  int err;
};

#define WORDS (UR_CHUNK_PAGES / 64)

static int add_run(struct plan *p, struct ur_chunk *c, uint64_t addr, uint64_t len) {
  if (p->nruns && p->runs[p->nruns - 1].chunk == c &&
      p->runs[p->nruns - 1].addr + p->runs[p->nruns - 1].len == addr) {
    p->runs[p->nruns - 1].len += len;
    return 0;
  }
  if (p->nruns == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 1024;
    struct read_run *r = realloc(p->runs, cap * sizeof(*r));
    if (!r) return -ENOMEM;
    p->runs = r;
    p->cap = cap;
  }
  p->runs[p->nruns++] = (struct read_run){c, addr, len};
  return 0;
}

/* Pages [first, first + n) of a chunk as a mask of its synced word w. */
static uint64_t word_mask(size_t w, size_t first, size_t n) {
  size_t lo = first > w * 64 ? first - w * 64 : 0, hi = first + n - w * 64;
  if (hi > 64) hi = 64;
  uint64_t upto = hi == 64 ? UINT64_MAX : (UINT64_C(1) << hi) - 1;
  return upto & ~((UINT64_C(1) << lo) - 1);
}

/* Apply one action to pages [lo, hi) (page aligned). */
static int apply(struct plan *p, uint64_t lo, uint64_t hi, enum action a) {
  while (lo < hi) {
    uint64_t base = lo & ~(UR_CHUNK_SIZE - 1), next = base + UR_CHUNK_SIZE;
    uint64_t end = next < hi && next > base ? next : hi; /* next wraps at the top */
    int err = 0;
    /* Zero pages need no slot: a chunk not held reads as zero (ur_sync's
     * zero ranges), which keeps a sparse reservation out of the cache. */
    struct ur_chunk *c =
        a == ZERO || p->held ? ur_mem_find(p->m, base) : ur_mem_chunk(p->m, base, &err);
    if (!c && p->held) { /* nothing of it held */
      lo = end;
      continue;
    }
    if (!c && a == ZERO) {
      p->st->pages_zeroed += (end - lo) >> UR_PAGE_SHIFT;
      lo = end;
      continue;
    }
    if (!c) return err;
    size_t first = (size_t)((lo - base) >> UR_PAGE_SHIFT);
    size_t n = (size_t)((end - lo) >> UR_PAGE_SHIFT);
    for (size_t w = first / 64; w * 64 < first + n; w++) {
      uint64_t mask = word_mask(w, first, n);
      if (p->held) mask &= c->synced[w];
      /* The common case of a refresh, 64 pages at a time: all kept. A page
       * still absent that is held as zero is kept too. */
      uint64_t todo = a == KEEP   ? mask & ~c->synced[w]
                      : a == ZERO ? mask & ~(c->synced[w] & c->zeroed[w])
                                  : mask;
      p->st->pages_kept += (uint64_t)__builtin_popcountll(mask & ~todo);
      if (a == ZERO)
        c->zeroed[w] |= todo;
      else
        c->zeroed[w] &= ~todo;
      while (todo) {
        size_t page = w * 64 + (size_t)__builtin_ctzll(todo);
        uint64_t bit = todo & -todo, addr = base + ((uint64_t)page << UR_PAGE_SHIFT);
        todo &= todo - 1;
        c->fresh = 0;
        if (a == ZERO) {
          memset(c->data + (addr - base), 0, UR_PAGE_SIZE);
          c->bad[w] &= ~bit;
          p->st->pages_zeroed++;
        } else {
          int rc = add_run(p, c, addr, UR_PAGE_SIZE);
          if (rc < 0) return rc;
          p->st->pages_read++;
        }
      }
      c->synced[w] |= mask;
      if (p->seen) p->seen[(size_t)(c - p->m->chunks) * WORDS + w] |= mask;
    }
    lo = end;
  }
  return 0;
}

static enum action decide(uint64_t cats, int anon, int refresh, struct ur_sync_stats *st,
                          uint64_t pages) {
  if (!(cats & (PAGE_IS_PRESENT | PAGE_IS_SWAPPED))) return anon ? ZERO : READ;
  if (!refresh) return READ;
  if (!(cats & PAGE_IS_WPALLOWED)) {
    st->untracked += pages;
    return READ;
  }
  return cats & PAGE_IS_WRITTEN ? READ : KEEP;
}

/* Pages the walk did not list: copying, those with no category at all
 * (absent, untracked); refreshing, those tracked, present and unwritten. */
static enum action unlisted(int anon, int refresh, struct ur_sync_stats *st, uint64_t pages) {
  return refresh ? KEEP : decide(0, anon, refresh, st, pages);
}

static int plan_range(struct plan *p, int pm, const struct ur_sync_range *r, int refresh) {
  struct page_region vec[VEC];
  int anon = (r->flags & UR_SYNC_ANON) != 0;
  /* Copying: every page, by what it is. Refreshing: only pages written,
   * untracked or gone are listed (the kernel's walk is 3x faster when most
   * pages do not match); the unlisted ones are kept. */
  uint64_t inverted = refresh ? PAGE_IS_WPALLOWED | PAGE_IS_PRESENT : 0;
  uint64_t pos = r->begin;
  while (pos < r->end) {
    uint64_t from = pos;
    struct pm_scan_arg a = {
        .size = sizeof(a),
        .start = pos,
        .end = r->end,
        .vec = (uint64_t)(uintptr_t)vec,
        .vec_len = VEC,
        .category_inverted = inverted,
        .category_anyof_mask = CATEGORIES,
        .return_mask = CATEGORIES,
    };
    long n = ioctl(pm, PAGEMAP_SCAN, &a);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    uint64_t walked = a.walk_end > r->end ? r->end : a.walk_end;
    for (long i = 0; i < n; i++) {
      uint64_t s = vec[i].start < pos ? pos : vec[i].start, e = vec[i].end;
      int rc;
      if (s > pos && (rc = apply(p, pos, s, unlisted(anon, refresh, p->st, (s - pos) >> 12))) < 0)
        return rc;
      if (e > s &&
          (rc = apply(p, s, e, decide(vec[i].categories, anon, refresh, p->st, (e - s) >> 12))) < 0)
        return rc;
      if (e > pos) pos = e;
    }
    if (walked > pos) {
      int rc = apply(p, pos, walked, unlisted(anon, refresh, p->st, (walked - pos) >> 12));
      if (rc < 0) return rc;
      pos = walked;
    }
    if (pos <= from) return -EIO; /* the walk made no progress */
  }
  return 0;
}

struct read_job {
  const struct ur_pread_mem *m;
  const struct read_run *runs;
  size_t n;
  unsigned k, threads;
};

/* A chunk's runs all go to one thread: runs of one chunk share its bitmaps.
 * Its runs that follow each other in ascending order are read together
 * (ur_mem_read_runs_into). */
static void *read_part(void *arg) {
  const struct read_job *j = arg;
  uint64_t pairs[2 * UR_CHUNK_PAGES];
  for (size_t i = 0; i < j->n;) {
    const struct read_run *r = &j->runs[i];
    size_t e = i + 1;
    while (e < j->n && e - i < UR_CHUNK_PAGES && j->runs[e].chunk == r->chunk &&
           j->runs[e].addr >= j->runs[e - 1].addr + j->runs[e - 1].len)
      e++;
    if ((size_t)(r->chunk - j->m->chunks) % j->threads == j->k) {
      for (size_t q = i; q < e; q++) {
        pairs[2 * (q - i)] = j->runs[q].addr;
        pairs[2 * (q - i) + 1] = j->runs[q].len;
      }
      ur_mem_read_runs_into(j->m, r->chunk, pairs, e - i);
    }
    i = e;
  }
  return NULL;
}

static void run_reads(const struct ur_pread_mem *m, const struct read_run *runs, size_t n,
                      unsigned threads) {
  if (threads < 1) threads = 1;
  if (threads > UR_MEM_MAX_THREADS) threads = UR_MEM_MAX_THREADS;
  struct read_job jobs[UR_MEM_MAX_THREADS];
  for (unsigned k = 0; k < threads; k++) jobs[k] = (struct read_job){m, runs, n, k, threads};
  ur_mem_parallel(threads, read_part, jobs, sizeof jobs[0]);
}

/* The zero ranges of an earlier sync that meet none of this sync's ranges
 * (span: its (begin, end) pairs, sorted), after the k in out, merged in
 * order with them. Returns the new count. */
static size_t keep_others(const struct ur_pread_mem *m, const uint64_t *span, size_t n,
                          uint64_t *out, size_t k, uint64_t *merged) {
  size_t s = 0, a = 0, t = 0;
  for (size_t j = 0; j < m->n_zero_ranges; j++) {
    uint64_t b = m->zero_ranges[2 * j], e = m->zero_ranges[2 * j + 1];
    while (s < n && span[2 * s + 1] <= b) s++;
    int met = 0; /* spans may overlap one another: any of those beginning before e */
    for (size_t q = s; q < n && span[2 * q] < e && !met; q++) met = span[2 * q + 1] > b;
    if (met) continue; /* this sync decides there */
    for (; a < k && out[2 * a] < b; a++, t++) memcpy(&merged[2 * t], &out[2 * a], 16);
    merged[2 * t] = b;
    merged[2 * t + 1] = e;
    t++;
  }
  for (; a < k; a++, t++) memcpy(&merged[2 * t], &out[2 * a], 16);
  return t;
}

/* The anonymous ranges: where a chunk the cache does not hold was absent.
 * A sync of some of the mappings (the classic copy's shared memory, read
 * after its stop) says nothing of the others: their zero ranges stay. */
static int set_zero_ranges(struct ur_pread_mem *m, const struct ur_sync_range *ranges, size_t n) {
  size_t cap = n + m->n_zero_ranges + 1;
  uint64_t *pairs = malloc(cap * 2 * sizeof(uint64_t)), *span = malloc(cap * 2 * sizeof(uint64_t));
  uint64_t *merged = malloc(cap * 2 * sizeof(uint64_t));
  int rc = pairs && span && merged ? 0 : -ENOMEM;
  size_t k = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    span[2 * i] = ranges[i].begin;
    span[2 * i + 1] = ranges[i].end;
    if (!(ranges[i].flags & UR_SYNC_ANON) || ranges[i].end <= ranges[i].begin) continue;
    if (ranges[i].flags & UR_SYNC_HELD) continue; /* not all of it is the copy's */
    if (k && ranges[i].begin < pairs[2 * k - 1]) rc = -EINVAL; /* the maps come sorted; */
    pairs[2 * k] = ranges[i].begin;                            /* anything else is refused */
    pairs[2 * k + 1] = ranges[i].end;
    k++;
  }
  if (rc == 0) {
    qsort(span, n, 2 * sizeof(uint64_t), ur_by_first_u64);
    rc = ur_mem_set_zero_ranges(m, merged, keep_others(m, span, n, pairs, k, merged));
  }
  free(pairs);
  free(span);
  free(merged);
  return rc;
}

int ur_sync(struct ur_pread_mem *m, int pagemap_fd, const struct ur_sync_range *ranges, size_t n,
            int refresh, unsigned threads, struct ur_sync_stats *st) {
  struct plan p = {.m = m, .st = st};
  if (refresh && !(p.seen = calloc(m->max_chunks * WORDS, sizeof(uint64_t)))) return -ENOMEM;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    p.held = refresh && (ranges[i].flags & UR_SYNC_HELD);
    if (ranges[i].end > ranges[i].begin) rc = plan_range(&p, pagemap_fd, &ranges[i], refresh);
  }
  /* Copied before but outside the ranges now (unmapped, or no longer
   * writable): no longer the process's memory. */
  if (p.seen && rc == 0)
    for (size_t i = 0; i < m->used_chunks; i++)
      for (size_t w = 0; w < WORDS; w++) m->chunks[i].synced[w] &= p.seen[i * WORDS + w];
  free(p.seen);
  /* A copy made in one stop (no refresh follows) needs them as well. */
  if (rc == 0) rc = set_zero_ranges(m, ranges, n);
  /* Planned reads happen even on failure: a chunk's synced bits promise them. */
  run_reads(m, p.runs, p.nruns, threads);
  free(p.runs);
  return rc;
}

void ur_sync_finish(struct ur_pread_mem *m) {
  for (size_t i = 0; i < m->used_chunks; i++) {
    struct ur_chunk *c = &m->chunks[i];
    /* Absent pages zeroed before their chunk had a slot (a page of it read
     * later in the same sync made one): zero, not unreadable. */
    for (size_t w = 0; w < WORDS; w++) {
      for (uint64_t todo = ~c->synced[w]; todo; todo &= todo - 1) {
        size_t page = w * 64 + (size_t)__builtin_ctzll(todo);
        if (!ur_mem_zero_range_end(m, c->base + page * UR_PAGE_SIZE)) continue;
        memset(c->data + page * UR_PAGE_SIZE, 0, UR_PAGE_SIZE);
        c->fresh = 0;
        c->bad[w] &= ~(todo & -todo);
        c->synced[w] |= todo & -todo;
      }
    }
    for (size_t w = 0; w < WORDS; w++) {
      c->bad[w] |= ~c->synced[w];
      if (c->bad[w]) c->any_bad = 1;
    }
  }
  ur_mem_freeze(m);
}
