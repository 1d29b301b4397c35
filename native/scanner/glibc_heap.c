/* glibc's ptmalloc heap walked from outside: glibc_heap.h, docs/glibc-heap.md. */
#include "glibc_heap.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_HDR 16
#define MINSIZE 32
#define PREV_INUSE 1u
#define IS_MMAPPED 2u
#define SIZE_BITS 7u
#define NONCONTIGUOUS 2u
#define NBINS 128
#define NFASTBINS 10
#define HEAP_MAX_DEFAULT (UINT64_C(64) << 20)
#define MAX_ARENAS 4096
#define MAX_HEAPS_PER_ARENA (1u << 20)
#define WINDOW (64u << 10)

int ur_glibc_layout_for(unsigned minor, struct ur_glibc_layout *l) {
  /* Supported: 2.31 (tcache counts are uint16_t from 2.30) to 2.43. */
  if (minor < 31 || minor > 43) return -1;
  memset(l, 0, sizeof(*l));
  l->minor = minor;
  l->arena_size = 0x898;
  l->off_fastbins = 0x10;
  l->nfastbins = NFASTBINS;
  l->off_top = 0x60;
  l->off_bins = 0x70;
  l->off_next = 0x870;
  l->off_system_mem = 0x888;
  /* 2.35 added heap_info.pagesize and mp_'s huge-page fields. */
  l->heap_info_size = minor >= 35 ? 0x30 : 0x20;
  l->mp_n_mmaps = minor >= 35 ? 0x3c : 0x28;
  l->mp_mmapped_mem = minor >= 35 ? 0x50 : 0x38;
  l->mp_sbrk_base = minor >= 35 ? 0x60 : 0x48;
  l->mp_hp_pagesize = minor >= 35 ? 0x30 : 0;
  l->heap_max_from_hp = minor >= 35 && minor <= 41;
  l->tcache_bins = 64;
  l->tcache_small_bins = 64;
  l->tcache_entries = 0x80;
  l->tcache_chunk = 0x290;
  if (minor >= 42) {
    /* uint16_t num_slots[76]; tcache_entry *entries[76]: 64 bins of one
     * size, then 12 of sizes between two powers of two. */
    l->tcache_bins = 76;
    l->tcache_entries = 0x98;
    l->tcache_chunk = 0x300;
    l->mp_tcache_count = 0x78;
  }
  if (minor >= 43) {
    /* malloc_state without have_fastchunks and fastbinsY[10]; mp_ with
     * thp_mode (an int and its padding) before thp_pagesize. */
    l->arena_size = 0x840;
    l->nfastbins = 0;
    l->off_top = 0x8;
    l->off_bins = 0x18;
    l->off_next = 0x818;
    l->off_system_mem = 0x830;
    l->mp_n_mmaps = 0x44;
    l->mp_mmapped_mem = 0x58;
    l->mp_sbrk_base = 0x68;
    l->mp_hp_pagesize = 0x38;
    l->mp_tcache_count = 0x80;
    l->mmap_trailer = 16;
  }
  l->safe_linking = minor >= 32;
  return 0;
}

enum {
  R_INUSE = 1,     /* the next chunk's PREV_INUSE is set */
  R_LISTED = 2,    /* in a fastbin or a tcache: free after all */
  R_BINNED = 4,    /* in a bin (checked against !R_INUSE) */
  R_INTERNAL = 8,  /* glibc's own: a tcache structure, a heap's end remnant */
  R_MMAPPED = 16,
  R_TOP = 32,
};

struct rec {
  uint64_t p, size;
  uint32_t flags, arena;
};

struct walk {
  const struct ur_gh_in *in;
  const struct ur_glibc_layout *L;
  struct ur_gh_out *out;
  uint8_t *win;
  uint64_t win_lo, win_hi;
  struct rec *recs;
  size_t n, cap;
  uint64_t *spans; /* (begin, end): memory that heaps cover, not searched for mmapped chunks */
  size_t nspans, spans_cap;
  uint64_t arenas[MAX_ARENAS];
  size_t narenas;
  uint64_t heap_max;
  uint64_t tcache_count; /* mp_.tcache_count, when the counts count down */
};

__attribute__((format(printf, 2, 3))) static int fail(struct walk *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->out->error, sizeof(w->out->error), fmt, ap);
  va_end(ap);
  return -EPROTO;
}

/* Sequential walks read through a window; anything it cannot hold whole is
 * read directly. 0, or -1 when a byte could not be read. */
static int rd(struct walk *w, uint64_t addr, void *buf, size_t len) {
  if (addr + len < addr) return -1;
  if (addr >= w->win_lo && addr + len <= w->win_hi) {
    memcpy(buf, w->win + (addr - w->win_lo), len);
    return 0;
  }
  if (len <= WINDOW / 2) {
    uint64_t lo = addr & ~UINT64_C(4095);
    if (w->in->read(w->in->ctx, lo, w->win, WINDOW) == WINDOW) {
      w->win_lo = lo;
      w->win_hi = lo + WINDOW;
      memcpy(buf, w->win + (addr - lo), len);
      return 0;
    }
    w->win_lo = w->win_hi = 0;
  }
  return w->in->read(w->in->ctx, addr, buf, len) == len ? 0 : -1;
}

static int rd64(struct walk *w, uint64_t addr, uint64_t *v) { return rd(w, addr, v, 8); }

static int add_rec(struct walk *w, uint64_t p, uint64_t size, uint32_t flags, uint32_t arena) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 4096;
    struct rec *r = realloc(w->recs, cap * sizeof(*r));
    if (!r) return -ENOMEM;
    w->recs = r;
    w->cap = cap;
  }
  w->recs[w->n++] = (struct rec){p, size, flags, arena};
  return 0;
}

static int add_span(struct walk *w, uint64_t b, uint64_t e) {
  if (w->nspans == w->spans_cap) {
    size_t cap = w->spans_cap ? w->spans_cap * 2 : 64;
    uint64_t *s = realloc(w->spans, cap * 2 * sizeof(*s));
    if (!s) return -ENOMEM;
    w->spans = s;
    w->spans_cap = cap;
  }
  w->spans[2 * w->nspans] = b;
  w->spans[2 * w->nspans++ + 1] = e;
  return 0;
}

/* The chunks of one heap from start: to top when the heap has it (top then
 * ends exactly at end), else to end, which a heap left behind for a newer
 * one marks with a header of size 0 (sysmalloc's fenceposts). */
static int walk_heap(struct walk *w, uint32_t arena, uint64_t start, uint64_t top, uint64_t end,
                     int is_main) {
  uint64_t p = start;
  uint64_t limit = top ? top : end;
  for (;;) {
    uint64_t hdr[2];
    if (top && p == top) {
      if (rd(w, p, hdr, 16) < 0) return fail(w, "top chunk at %#lx unreadable", (unsigned long)p);
      uint64_t sz = hdr[1] & ~(uint64_t)SIZE_BITS;
      if (!(hdr[1] & PREV_INUSE) || p + sz != end)
        return fail(w, "top chunk at %#lx (size %#lx) does not end its heap at %#lx",
                    (unsigned long)p, (unsigned long)sz, (unsigned long)end);
      return add_rec(w, p, sz, R_TOP, arena);
    }
    if (p + CHUNK_HDR > limit || p < start)
      return fail(w, "heap walk from %#lx passed %#lx at %#lx", (unsigned long)start,
                  (unsigned long)limit, (unsigned long)p);
    if (rd(w, p, hdr, 16) < 0) return fail(w, "chunk at %#lx unreadable", (unsigned long)p);
    uint64_t sz = hdr[1] & ~(uint64_t)SIZE_BITS;
    if (!top && sz == 0 && p + CHUNK_HDR == end) return 0; /* a left heap's last header */
    if (sz == CHUNK_HDR && !top && p + 2 * CHUNK_HDR == end) {
      p += CHUNK_HDR; /* its fencepost */
      continue;
    }
    if (sz == CHUNK_HDR && is_main)
      return fail(w, "a gap in the main heap at %#lx (memory another caller took with sbrk)",
                  (unsigned long)p);
    if (sz < MINSIZE || (sz & 15) || (hdr[1] & IS_MMAPPED))
      return fail(w, "chunk at %#lx has a bad size field %#lx", (unsigned long)p,
                  (unsigned long)hdr[1]);
    if (p + sz > limit || p + sz < p)
      return fail(w, "chunk at %#lx (size %#lx) runs past %#lx", (unsigned long)p,
                  (unsigned long)sz, (unsigned long)limit);
    uint64_t next[2];
    if (rd(w, p + sz, next, 16) < 0)
      return fail(w, "chunk after %#lx unreadable", (unsigned long)p);
    uint32_t flags = 0;
    if (next[1] & PREV_INUSE) {
      flags = R_INUSE;
      /* A heap left for a newer one whose top was too small to free: the
       * old top became this chunk, right before the last header. */
      if (!top && p + sz + CHUNK_HDR == end) flags |= R_INTERNAL;
    } else if (next[0] != sz) {
      return fail(w, "free chunk at %#lx: size %#lx, but the next chunk's prev_size is %#lx",
                  (unsigned long)p, (unsigned long)sz, (unsigned long)next[0]);
    }
    int rc = add_rec(w, p, sz, flags, arena);
    if (rc) return rc;
    p += sz;
  }
}

static uint64_t u64_at(const uint8_t *b, uint64_t off) {
  uint64_t v;
  memcpy(&v, b + off, 8);
  return v;
}

static int walk_arena(struct walk *w, uint32_t idx, const uint8_t *a) {
  const struct ur_glibc_layout *L = w->L;
  uint64_t addr = w->arenas[idx];
  uint64_t top = u64_at(a, L->off_top);
  uint64_t system_mem = u64_at(a, L->off_system_mem);
  uint32_t flags;
  memcpy(&flags, a + 4, 4);
  if (idx == 0) {
    /* Never used: top is 0 before malloc_init_state, initial_top after. */
    if (!top || top == addr + L->off_bins - CHUNK_HDR) return 0;
    if (flags & NONCONTIGUOUS)
      return fail(w, "the main arena is not contiguous (brk failed and glibc mapped its memory)");
    uint64_t sbrk_base, tophdr[2];
    if (rd64(w, w->in->mp + w->L->mp_sbrk_base, &sbrk_base) < 0 || rd(w, top, tophdr, 16) < 0)
      return fail(w, "mp_.sbrk_base or the main arena's top unreadable");
    uint64_t start = sbrk_base;
    if ((start + CHUNK_HDR) & 15) start += 16 - ((start + CHUNK_HDR) & 15);
    uint64_t end = top + (tophdr[1] & ~(uint64_t)SIZE_BITS);
    if (!sbrk_base || top < start || end != sbrk_base + system_mem)
      return fail(w,
                  "the main heap from %#lx to top %#lx does not match its %#lx bytes of "
                  "system memory",
                  (unsigned long)sbrk_base, (unsigned long)top, (unsigned long)system_mem);
    int rc = add_span(w, sbrk_base, end);
    return rc ? rc : walk_heap(w, idx, start, top, end, 1);
  }
  uint64_t first = addr - L->heap_info_size;
  uint64_t info[4]; /* ar_ptr, prev, size, mprotect_size */
  if ((first & (w->heap_max - 1)) || rd(w, first, info, sizeof(info)) < 0 || info[0] != addr)
    return fail(w, "arena %#lx is not at the start of a heap of its own", (unsigned long)addr);
  uint64_t h = top & ~(w->heap_max - 1);
  /* An arena's system_mem is the sum of its heaps' sizes (new_heap,
   * grow_heap, shrink_heap and heap_trim keep it so): a bound on the walk
   * through prev, and at its end a check. */
  uint64_t total = 0;
  for (unsigned k = 0;; k++) {
    if (k == MAX_HEAPS_PER_ARENA)
      return fail(w, "arena %#lx: its heaps do not lead back to its first", (unsigned long)addr);
    if (rd(w, h, info, sizeof(info)) < 0 || info[0] != addr)
      return fail(w, "arena %#lx: heap %#lx does not name it", (unsigned long)addr,
                  (unsigned long)h);
    uint64_t size = info[2];
    if (size < L->heap_info_size || size > w->heap_max || size > info[3])
      return fail(w, "heap %#lx: bad size %#lx", (unsigned long)h, (unsigned long)size);
    total += size;
    if (total > system_mem)
      return fail(w, "arena %#lx: its heaps hold more than its %#lx bytes of system memory",
                  (unsigned long)addr, (unsigned long)system_mem);
    uint64_t start = h + L->heap_info_size;
    if (h == first) {
      /* _int_new_arena: after the arena, with chunk2mem 16-aligned. */
      start = first + L->heap_info_size + L->arena_size;
      if ((start + CHUNK_HDR) & 15) start += 16 - ((start + CHUNK_HDR) & 15);
    }
    int rc = add_span(w, h, h + w->heap_max);
    if (rc) return rc;
    w->out->stats.heaps++;
    rc = walk_heap(w, idx, start, k == 0 ? top : 0, h + size, 0);
    if (rc) return rc;
    if (h == first) {
      if (info[1]) return fail(w, "first heap %#lx has a prev", (unsigned long)h);
      if (total != system_mem)
        return fail(w, "arena %#lx: its heaps hold %#lx bytes, its system memory is %#lx",
                    (unsigned long)addr, (unsigned long)total, (unsigned long)system_mem);
      return 0;
    }
    if (!info[1] || (info[1] & (w->heap_max - 1)))
      return fail(w, "arena %#lx: heap %#lx has no previous heap", (unsigned long)addr,
                  (unsigned long)h);
    h = info[1];
  }
}

static int cmp_rec(const void *a, const void *b) {
  uint64_t x = ((const struct rec *)a)->p, y = ((const struct rec *)b)->p;
  return x < y ? -1 : x > y;
}

static int cmp_u64_pair(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static struct rec *find(struct walk *w, uint64_t p) {
  size_t lo = 0, hi = w->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w->recs[mid].p < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < w->n && w->recs[lo].p == p ? &w->recs[lo] : NULL;
}

/* memalign moves a chunk it had mapped alone forward in its mapping, to the
 * alignment asked for: the new header has prev_size = its distance from the
 * mapping's start and the rest of the size, and the old header stays at
 * the start. The distance of the moved header in the first MAX_LEAD bytes,
 * or 0. */
#define MAX_LEAD (UINT64_C(2) << 20)
static uint64_t moved_header(struct walk *w, uint64_t a, uint64_t sz) {
  uint64_t end = sz - MINSIZE < MAX_LEAD ? sz - MINSIZE : MAX_LEAD;
  for (uint64_t o = 16; o <= end; o += 16) {
    uint64_t hdr[2];
    if (rd(w, a + o, hdr, 16) < 0) return 0;
    if (hdr[0] == o && hdr[1] == ((sz - o - w->L->mmap_trailer) | IS_MMAPPED)) return o;
  }
  return 0;
}

/* Chunks mmap'ed alone, in the anonymous memory outside the heaps: at a page
 * start, a header (prev_size 0) whose size, with IS_MMAPPED, is a whole
 * number of pages inside the mapping; or, memalign'ed, the header it moved. */
static int find_mmapped(struct walk *w) {
  uint64_t page = w->in->page_size ? w->in->page_size : 4096;
  if (w->nspans) qsort(w->spans, w->nspans, 2 * sizeof(uint64_t), cmp_u64_pair);
  size_t s = 0, p = 0;
  const uint64_t *present = w->in->present;
  for (size_t i = 0; i < w->in->nanon; i++) {
    uint64_t b = w->in->anon[2 * i], e = w->in->anon[2 * i + 1];
    uint64_t a = (b + page - 1) & ~(page - 1);
    while (a + CHUNK_HDR <= e) {
      while (s < w->nspans && w->spans[2 * s + 1] <= a) s++;
      if (s < w->nspans && w->spans[2 * s] <= a) {
        a = (w->spans[2 * s + 1] + page - 1) & ~(page - 1);
        continue;
      }
      if (present) {
        while (p < w->in->npresent && present[2 * p + 1] <= a) p++;
        if (p == w->in->npresent) break;
        if (present[2 * p] > a) { /* to the next page that exists */
          a = (present[2 * p] + page - 1) & ~(page - 1);
          continue;
        }
      }
      uint64_t hdr[2];
      if (w->in->read(w->in->ctx, a, hdr, 16) == 16 && hdr[0] == 0 &&
          (hdr[1] & SIZE_BITS) == IS_MMAPPED) {
        uint64_t sz = (hdr[1] & ~(uint64_t)SIZE_BITS) + w->L->mmap_trailer; /* the mapping */
        if (sz >= page && sz % page == 0 && a + sz <= e && a + sz > a) {
          uint64_t lead = moved_header(w, a, sz);
          int rc = add_rec(w, a + lead, sz - lead, R_INUSE | R_MMAPPED, UINT32_MAX);
          if (rc) return rc;
          w->out->stats.mmapped++;
          w->out->stats.mmapped_bytes += sz; /* mp_.mmapped_mem counts whole mappings */
          a += sz;
          continue;
        }
      }
      a += page;
    }
  }
  uint64_t mem = 0;
  int32_t n_mmaps = 0;
  if (rd(w, w->in->mp + w->L->mp_n_mmaps, &n_mmaps, 4) < 0 ||
      rd64(w, w->in->mp + w->L->mp_mmapped_mem, &mem) < 0)
    return fail(w, "mp_ unreadable");
  /* 2.43's mremap_chunk adds new_size - chunksize - offset to mmapped_mem,
   * and chunksize no longer counts the mapping's last 16 bytes: each remap
   * leaves mmapped_mem 16 bytes high. There it may exceed the mappings'
   * sum by a multiple of 16. */
  uint64_t found = w->out->stats.mmapped_bytes;
  int mem_ok = w->L->mmap_trailer ? mem >= found && (mem - found) % 16 == 0 : mem == found;
  if ((uint64_t)n_mmaps != w->out->stats.mmapped || !mem_ok)
    return fail(w, "found %lu chunks mmap'ed alone (%lu bytes), mp_ counts %d (%lu bytes)",
                (unsigned long)w->out->stats.mmapped, (unsigned long)w->out->stats.mmapped_bytes,
                n_mmaps, (unsigned long)mem);
  return 0;
}

/* Bin i of one size holds chunks of 0x20 + 16 i bytes; a larger bin (2.42)
 * those whose highest bit is i - 54 (glibc's large_csize2tidx), above the
 * one-size bins' sizes. */
static int tcache_size_fits(const struct ur_glibc_layout *L, unsigned i, uint64_t size) {
  if (i < L->tcache_small_bins) return size == MINSIZE + 16 * (uint64_t)i;
  uint64_t top_small = MINSIZE + 16 * (uint64_t)(L->tcache_small_bins - 1);
  return size > top_small && 63u - (unsigned)__builtin_clzll(size) == i - 54;
}

/* A tcache's chunk: its struct's size, or 16 more when glibc gave it the
 * whole of a free chunk whose rest was smaller than a chunk (syslog-ng's
 * worker threads had such). */
static int is_tcache_chunk(const struct ur_glibc_layout *L, uint64_t size) {
  return size >= L->tcache_chunk && size < L->tcache_chunk + MINSIZE;
}

/* Each thread's tcache: its structure is glibc's, its lists are free. */
static int subtract_tcaches(struct walk *w) {
  const struct ur_glibc_layout *L = w->L;
  for (size_t t = 0; t < w->in->ntcaches; t++) {
    uint64_t tc = w->in->tcaches[t];
    if (!tc) continue;
    struct rec *r = find(w, tc - CHUNK_HDR);
    if (!r || !is_tcache_chunk(L, r->size) || !(r->flags & R_INUSE) || (r->flags & R_MMAPPED))
      return fail(w, "a thread's tcache pointer %#lx names no tcache chunk", (unsigned long)tc);
    if (r->flags & R_INTERNAL) continue; /* two threads named the same one */
    r->flags |= R_INTERNAL;
    w->out->stats.internal++;
    uint16_t counts[128];
    uint64_t entries[128];
    if (rd(w, tc, counts, L->tcache_bins * 2) < 0 ||
        rd(w, tc + L->tcache_entries, entries, L->tcache_bins * 8) < 0)
      return fail(w, "tcache at %#lx unreadable", (unsigned long)tc);
    if (L->mp_tcache_count) {
      for (unsigned i = 0; i < L->tcache_bins; i++) {
        if (counts[i] > w->tcache_count)
          return fail(w, "tcache %#lx bin %u: %u slots left of %lu", (unsigned long)tc, i,
                      counts[i], (unsigned long)w->tcache_count);
        counts[i] = (uint16_t)(w->tcache_count - counts[i]);
      }
    }
    for (unsigned i = 0; i < L->tcache_bins; i++) {
      uint64_t e = entries[i];
      unsigned n = 0;
      for (; e; n++) {
        struct rec *c = (e & 15) || n >= counts[i] ? NULL : find(w, e - CHUNK_HDR);
        if (!c || !tcache_size_fits(L, i, c->size) || (c->flags & (R_LISTED | R_MMAPPED)) ||
            !(c->flags & R_INUSE))
          return fail(w, "tcache %#lx bin %u: entry %u (%#lx) is not a chunk of its size",
                      (unsigned long)tc, i, n, (unsigned long)e);
        c->flags |= R_LISTED;
        w->out->stats.free_tcache++;
        uint64_t next;
        if (rd64(w, e, &next) < 0) return fail(w, "tcache entry %#lx unreadable", (unsigned long)e);
        e = L->safe_linking ? next ^ (e >> 12) : next;
      }
      if (n != counts[i])
        return fail(w, "tcache %#lx bin %u: %u entries, count says %u", (unsigned long)tc, i, n,
                    counts[i]);
    }
  }
  return 0;
}

static int check_lists(struct walk *w, uint32_t idx, const uint8_t *a) {
  const struct ur_glibc_layout *L = w->L;
  uint64_t addr = w->arenas[idx];
  uint64_t top = u64_at(a, L->off_top);
  if (idx == 0 && (!top || top == addr + L->off_bins - CHUNK_HDR)) return 0;
  for (unsigned i = 0; i < L->nfastbins; i++) {
    uint64_t p = u64_at(a, L->off_fastbins + 8 * i);
    for (size_t n = 0; p; n++) {
      struct rec *c = (p & 15) || n > w->n ? NULL : find(w, p);
      if (!c || c->arena != idx || (c->size >> 4) - 2 != i || !(c->flags & R_INUSE) ||
          (c->flags & (R_LISTED | R_INTERNAL)))
        return fail(w, "arena %#lx fastbin %u: entry %lu (%#lx) is not a chunk of its size",
                    (unsigned long)addr, i, (unsigned long)n, (unsigned long)p);
      c->flags |= R_LISTED;
      w->out->stats.free_fast++;
      uint64_t fd;
      if (rd64(w, p + 16, &fd) < 0) return fail(w, "fastbin entry unreadable");
      p = L->safe_linking ? fd ^ ((p + 16) >> 12) : fd;
    }
  }
  uint64_t binned = 0;
  for (unsigned i = 1; i < NBINS; i++) {
    uint64_t head = addr + L->off_bins + (uint64_t)(i - 1) * 16 - CHUNK_HDR;
    uint64_t prev = head, p = u64_at(a, L->off_bins + (uint64_t)(i - 1) * 16);
    for (size_t n = 0; p != head; n++) {
      struct rec *c = n > w->n ? NULL : find(w, p);
      uint64_t link[2];
      if (!c || c->arena != idx || (c->flags & (R_INUSE | R_BINNED | R_TOP)) ||
          rd(w, p + 16, link, 16) < 0 || link[1] != prev)
        return fail(w, "arena %#lx bin %u: entry %lu (%#lx) is not a free chunk linked back",
                    (unsigned long)addr, i, (unsigned long)n, (unsigned long)p);
      c->flags |= R_BINNED;
      binned++;
      prev = p;
      p = link[0];
    }
  }
  uint64_t free_chunks = 0;
  for (size_t k = 0; k < w->n; k++)
    if (w->recs[k].arena == idx && !(w->recs[k].flags & (R_INUSE | R_TOP))) free_chunks++;
  if (free_chunks != binned)
    return fail(w, "arena %#lx: %lu free chunks, %lu of them in its bins", (unsigned long)addr,
                (unsigned long)free_chunks, (unsigned long)binned);
  w->out->stats.free_binned += binned;
  return 0;
}

static int run(struct walk *w, uint8_t **arena_bufs) {
  const struct ur_glibc_layout *L = w->L;
  uint64_t a = w->in->main_arena;
  do {
    if (w->narenas == MAX_ARENAS)
      return fail(w, "main_arena's ring of arenas does not close in %d", MAX_ARENAS);
    if (!a || (a & 7)) return fail(w, "arena ring leads to %#lx", (unsigned long)a);
    w->arenas[w->narenas++] = a;
    uint64_t next;
    if (rd64(w, a + L->off_next, &next) < 0)
      return fail(w, "arena %#lx unreadable", (unsigned long)a);
    a = next;
  } while (a != w->in->main_arena);
  w->out->stats.arenas = w->narenas;
  w->heap_max = HEAP_MAX_DEFAULT;
  if (L->mp_tcache_count && rd64(w, w->in->mp + L->mp_tcache_count, &w->tcache_count) < 0)
    return fail(w, "mp_ unreadable");
  if (L->heap_max_from_hp) {
    uint64_t hp;
    if (rd64(w, w->in->mp + L->mp_hp_pagesize, &hp) < 0) return fail(w, "mp_ unreadable");
    if (hp) w->heap_max = 4 * hp;
    if (w->heap_max & (w->heap_max - 1)) return fail(w, "mp_.hp_pagesize %#lx", (unsigned long)hp);
  }
  for (size_t i = 0; i < w->narenas; i++) {
    if (!(arena_bufs[i] = malloc(L->arena_size))) return -ENOMEM;
    if (rd(w, w->arenas[i], arena_bufs[i], L->arena_size) < 0)
      return fail(w, "arena %#lx unreadable", (unsigned long)w->arenas[i]);
    uint32_t mutex;
    memcpy(&mutex, arena_bufs[i], 4);
    if (mutex) {
      snprintf(w->out->error, sizeof(w->out->error),
               "arena %#lx is locked: a thread is inside malloc", (unsigned long)w->arenas[i]);
      return -EBUSY;
    }
  }
  for (size_t i = 0; i < w->narenas; i++) {
    int rc = walk_arena(w, (uint32_t)i, arena_bufs[i]);
    if (rc) return rc;
  }
  int rc = find_mmapped(w);
  if (rc) return rc;
  if (w->n) qsort(w->recs, w->n, sizeof(*w->recs), cmp_rec);
  for (size_t k = 0; k + 1 < w->n; k++)
    if (w->recs[k].p + w->recs[k].size > w->recs[k + 1].p)
      return fail(w, "chunks at %#lx and %#lx overlap", (unsigned long)w->recs[k].p,
                  (unsigned long)w->recs[k + 1].p);
  if ((rc = subtract_tcaches(w))) return rc;
  for (size_t i = 0; i < w->narenas; i++)
    if ((rc = check_lists(w, (uint32_t)i, arena_bufs[i]))) return rc;
  size_t live = 0;
  for (size_t k = 0; k < w->n; k++) {
    uint32_t f = w->recs[k].flags;
    if ((f & R_INUSE) && !(f & (R_LISTED | R_INTERNAL | R_TOP))) live++;
    if ((f & R_INTERNAL) && !(f & R_MMAPPED) && !is_tcache_chunk(L, w->recs[k].size))
      w->out->stats.internal++;
  }
  w->out->stats.chunks = w->n;
  uint64_t *allocs = malloc((live ? live : 1) * 2 * sizeof(uint64_t));
  if (!allocs) return -ENOMEM;
  size_t j = 0;
  for (size_t k = 0; k < w->n; k++) {
    const struct rec *r = &w->recs[k];
    if (!(r->flags & R_INUSE) || (r->flags & (R_LISTED | R_INTERNAL | R_TOP))) continue;
    /* Usable size (malloc_usable_size): a heap chunk's user part runs into
     * the next chunk's prev_size; an mmapped one's does not (its record
     * spans the rest of its mapping, from 2.43 16 bytes more than its
     * chunk, whose last 8 bytes are then usable as any chunk's). */
    uint64_t usable = r->size - (r->flags & R_MMAPPED ? CHUNK_HDR + L->mmap_trailer / 2
                                                      : CHUNK_HDR / 2);
    allocs[2 * j] = r->p + CHUNK_HDR;
    allocs[2 * j + 1] = usable;
    w->out->stats.in_use_bytes += usable;
    j++;
  }
  w->out->stats.in_use = j;
  w->out->allocs = allocs;
  w->out->nallocs = j;
  return 0;
}

int ur_glibc_heap_walk(const struct ur_gh_in *in, struct ur_gh_out *out) {
  memset(out, 0, sizeof(*out));
  struct walk w = {.in = in, .L = in->layout, .out = out};
  uint8_t **arena_bufs = calloc(MAX_ARENAS, sizeof(*arena_bufs));
  w.win = malloc(WINDOW);
  int rc = arena_bufs && w.win ? run(&w, arena_bufs) : -ENOMEM;
  for (size_t i = 0; arena_bufs && i < MAX_ARENAS; i++) free(arena_bufs[i]);
  free(arena_bufs);
  free(w.win);
  free(w.recs);
  free(w.spans);
  if (rc && out->allocs) {
    free(out->allocs);
    out->allocs = NULL;
    out->nallocs = 0;
  }
  return rc;
}
