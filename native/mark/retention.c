#include "retention.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "radix_sort.h"

struct hits {
  struct ur_root_hit *v;
  size_t n, cap;
};

static int add_hit(struct hits *h, uint64_t where, uint64_t value, uint32_t region,
                   uint32_t block) {
  if (h->n == h->cap) {
    size_t cap = h->cap ? 2 * h->cap : 4096;
    struct ur_root_hit *v = h->v ? ur_big_realloc(h->v, cap * sizeof(*v))
                                 : ur_big_calloc(cap, sizeof(*v));
    if (!v) return -ENOMEM;
    h->v = v;
    h->cap = cap;
  }
  h->v[h->n++] = (struct ur_root_hit){where, value, region, block};
  return 0;
}

static uint32_t region_of(const uint64_t *regions, size_t n, uint64_t a, uint32_t fallback) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (regions[3 * mid + 1] <= a) lo = mid + 1;
    else hi = mid;
  }
  if (lo < n && regions[3 * lo] <= a && a < regions[3 * lo + 1]) return (uint32_t)regions[3 * lo + 2];
  return fallback;
}

static int by_region_then_where(const void *a, const void *b) {
  const struct ur_root_hit *x = a, *y = b;
  if (x->region != y->region) return x->region < y->region ? -1 : 1;
  if (x->where != y->where) return x->where < y->where ? -1 : 1;
  return x->block < y->block ? -1 : x->block > y->block;
}

int ur_retention_hits(struct ur_walker *w, const uint64_t *ranges, size_t nranges,
                      const uint64_t *values, size_t nvalues, const uint64_t *regions,
                      size_t nregions, const uint32_t *value_regions, uint32_t default_region,
                      struct ur_root_hit **out, size_t *nout) {
  struct hits h = {0};
  *out = NULL;
  *nout = 0;
  /* The mark's own scan of the roots (heap_walker.c scan_range) keeps no
   * word addresses; this one does, for the few words that hit. */
  for (size_t r = 0; r < nranges && w->n; r++) {
    uint64_t begin = ranges[2 * r], end = ranges[2 * r + 1];
    if (begin > UINT64_MAX - 7) continue;
    uint64_t a = (begin + 7) & ~UINT64_C(7);
    while (a < end) {
      uint64_t avail;
      const uint8_t *p = ur_mem_view(w->mem, a, end, &avail);
      if (!p) goto nomem;
      size_t nwords = (size_t)((avail + 7) / 8);
      for (size_t k = 0; k < nwords; k++) {
        uint64_t v;
        memcpy(&v, p + 8 * k, 8);
        ssize_t idx = ur_walker_find(w, v);
        if (idx < 0) continue;
        uint64_t at = a + 8 * (uint64_t)k;
        if (add_hit(&h, at, v, region_of(regions, nregions, at, default_region), (uint32_t)idx))
          goto nomem;
      }
      uint64_t next = a + 8 * (uint64_t)nwords;
      if (next < a) break;
      a = next;
    }
  }
  for (size_t i = 0; i < nvalues && w->n; i++) {
    ssize_t idx = ur_walker_find(w, values[i]);
    if (idx >= 0 && add_hit(&h, i, values[i], value_regions[i], (uint32_t)idx)) goto nomem;
  }
  if (h.n) qsort(h.v, h.n, sizeof(*h.v), by_region_then_where);
  *out = h.v;
  *nout = h.n;
  return 0;
nomem:
  ur_big_free(h.v);
  return -ENOMEM;
}

int ur_retention_path(const struct ur_walker *w, const uint32_t *sources, size_t nsources,
                      uint32_t target, uint32_t **path, size_t *len, size_t *source) {
  const uint32_t none = UINT32_MAX;
  size_t n = w->n;
  *path = NULL;
  *len = 0;
  if (target >= n || !w->has_graph) return 0;
  uint32_t *parent = ur_big_calloc(n, sizeof(*parent));
  uint32_t *queue = ur_big_calloc(n, sizeof(*queue));
  int rc = -ENOMEM;
  if (!parent || !queue) goto out;
  memset(parent, 0xff, n * sizeof(*parent));
  size_t head = 0, tail = 0;
  for (size_t s = 0; s < nsources; s++) {
    uint32_t b = sources[s];
    if (b >= n || parent[b] != none) continue;
    parent[b] = b; /* a source is its own parent */
    queue[tail++] = b;
  }
  rc = 0;
  while (head < tail && parent[target] == none) {
    uint32_t b = queue[head++];
    size_t count;
    const uint32_t *to = ur_ref_graph_edges(&w->graph, b, &count);
    for (size_t e = 0; e < count; e++) {
      if (parent[to[e]] != none) continue;
      parent[to[e]] = b;
      queue[tail++] = to[e];
    }
  }
  if (parent[target] == none) goto out;
  size_t depth = 1;
  for (uint32_t b = target; parent[b] != b; b = parent[b]) depth++;
  uint32_t *p = ur_big_calloc(depth, sizeof(*p));
  rc = -ENOMEM;
  if (!p) goto out;
  size_t k = depth;
  for (uint32_t b = target;; b = parent[b]) {
    p[--k] = b;
    if (parent[b] == b) break;
  }
  for (size_t s = 0; s < nsources; s++)
    if (sources[s] == p[0]) {
      *source = s;
      break;
    }
  *path = p;
  *len = depth;
  rc = 1;
out:
  ur_big_free(parent);
  ur_big_free(queue);
  return rc;
}

int64_t ur_retention_edge(struct ur_walker *w, uint32_t from, uint32_t to, uint64_t *value) {
  if (from >= w->n || to >= w->n || ur_walker_begin(w, from) > UINT64_MAX - 7) return -1;
  uint64_t lo = ur_walker_begin(w, to), hi = ur_block_reach(w->pairs, to, w->index.sizes);
  uint64_t a = (ur_walker_begin(w, from) + 7) & ~UINT64_C(7), end = ur_walker_end(w, from);
  while (a < end) {
    uint64_t avail;
    const uint8_t *p = ur_mem_view(w->mem, a, end, &avail);
    if (!p) return -1;
    size_t nwords = (size_t)((avail + 7) / 8);
    for (size_t k = 0; k < nwords; k++) {
      uint64_t v;
      memcpy(&v, p + 8 * k, 8);
      /* The lookup settles a value that is also the next block's begin. */
      if (v - lo < hi - lo && ur_walker_find(w, v) == (ssize_t)to) {
        *value = v;
        return (int64_t)(a + 8 * (uint64_t)k - ur_walker_begin(w, from));
      }
    }
    uint64_t next = a + 8 * (uint64_t)nwords;
    if (next < a) break;
    a = next;
  }
  return -1;
}

/* The graph the tree is computed over: node 0 the virtual root, 1..R the
 * regions, R+1+i sorted block i. */
struct dom_graph {
  const struct ur_walker *w;
  const struct ur_root_hit *hits;
  const uint64_t *hoff; /* per region: its first hit; R+1 entries */
  uint32_t nregions;
};

/* Successors of node v from position pos: the next one (UINT32_MAX: none). */
static uint32_t next_succ(const struct dom_graph *g, uint32_t v, uint64_t *pos) {
  uint32_t R = g->nregions;
  if (v == 0) return *pos < R ? (uint32_t)(1 + (*pos)++) : UINT32_MAX;
  if (v <= R) {
    uint64_t at = g->hoff[v - 1] + *pos;
    if (at >= g->hoff[v]) return UINT32_MAX;
    (*pos)++;
    return R + 1 + g->hits[at].block;
  }
  size_t count;
  const uint32_t *to = ur_ref_graph_edges(&g->w->graph, v - R - 1, &count);
  if (*pos >= count) return UINT32_MAX;
  return R + 1 + to[(*pos)++];
}

int ur_retention_dominators(const struct ur_walker *w, const struct ur_root_hit *hits,
                            size_t nhits, uint32_t nregions, int64_t *idom_out, uint64_t *retained,
                            uint64_t *retained_count, uint64_t *region_bytes,
                            uint64_t *region_count) {
  size_t n = w->n;
  if (!w->has_graph) return -EINVAL;
  if ((uint64_t)n + nregions + 1 >= UINT32_MAX) return -E2BIG;
  uint32_t N = (uint32_t)(n + nregions + 1), R = nregions;
  uint64_t *hoff = ur_big_calloc((size_t)R + 1, sizeof(*hoff));
  uint64_t *poff = ur_big_calloc((size_t)N + 1, sizeof(*poff));
  uint32_t *dfnum = ur_big_calloc(N, sizeof(uint32_t));
  /* dfs-number space, 1..count */
  uint32_t *vertex = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint32_t *parent = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint32_t *semi = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint32_t *idom = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint32_t *ancestor = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint32_t *label = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint32_t *bhead = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint32_t *bnext = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint32_t *stack = ur_big_calloc((size_t)N + 1, sizeof(uint32_t));
  uint64_t *spos = ur_big_calloc((size_t)N + 1, sizeof(uint64_t));
  uint64_t *ret = ur_big_calloc((size_t)N + 1, sizeof(uint64_t));
  uint64_t *cnt = ur_big_calloc((size_t)N + 1, sizeof(uint64_t));
  uint32_t *padj = NULL;
  int rc = -ENOMEM;
  if (!hoff || !poff || !dfnum || !vertex || !parent || !semi || !idom || !ancestor || !label ||
      !bhead || !bnext || !stack || !spos || !ret || !cnt)
    goto out;
  for (size_t k = 0; k < nhits; k++)
    if (hits[k].region < R) hoff[hits[k].region + 1]++;
  for (uint32_t r = 0; r < R; r++) hoff[r + 1] += hoff[r];
  struct dom_graph g = {w, hits, hoff, R};

  /* Predecessor lists: every edge of next_succ, counted then placed. */
  for (uint32_t v = 0; v < N; v++) {
    uint64_t pos = 0;
    for (uint32_t s; (s = next_succ(&g, v, &pos)) != UINT32_MAX;) poff[s + 1]++;
  }
  for (uint32_t v = 0; v < N; v++) poff[v + 1] += poff[v];
  padj = ur_big_calloc(poff[N] ? poff[N] : 1, sizeof(*padj));
  if (!padj) goto out;
  {
    uint64_t *fill = spos; /* scratch until the search */
    memcpy(fill, poff, (size_t)N * sizeof(*fill));
    for (uint32_t v = 0; v < N; v++) {
      uint64_t pos = 0;
      for (uint32_t s; (s = next_succ(&g, v, &pos)) != UINT32_MAX;) padj[fill[s]++] = v;
    }
    memset(spos, 0, ((size_t)N + 1) * sizeof(*spos));
  }

  /* Depth-first numbering from the virtual root. */
  uint32_t count = 0, depth = 0;
  dfnum[0] = ++count;
  vertex[count] = 0;
  stack[depth] = 0;
  spos[depth++] = 0;
  while (depth) {
    uint32_t v = stack[depth - 1];
    uint32_t s = next_succ(&g, v, &spos[depth - 1]);
    if (s == UINT32_MAX) {
      depth--;
      continue;
    }
    if (dfnum[s]) continue;
    dfnum[s] = ++count;
    vertex[count] = s;
    parent[count] = dfnum[v];
    stack[depth] = s;
    spos[depth++] = 0;
  }
  for (uint32_t i = 1; i <= count; i++) semi[i] = label[i] = i;

  /* Lengauer-Tarjan, in dfs numbers. stack serves as eval's path. */
  for (uint32_t wv = count; wv >= 2; wv--) {
    uint32_t node = vertex[wv];
    for (uint64_t e = poff[node]; e < poff[node + 1]; e++) {
      uint32_t v = dfnum[padj[e]];
      if (!v) continue;
      uint32_t u = v;
      if (ancestor[v]) {
        uint32_t sp = 0, x = v;
        while (ancestor[ancestor[x]]) {
          stack[sp++] = x;
          x = ancestor[x];
        }
        while (sp) {
          x = stack[--sp];
          uint32_t a = ancestor[x];
          if (semi[label[a]] < semi[label[x]]) label[x] = label[a];
          ancestor[x] = ancestor[a];
        }
        u = label[v];
      }
      if (semi[u] < semi[wv]) semi[wv] = semi[u];
    }
    bnext[wv] = bhead[semi[wv]];
    bhead[semi[wv]] = wv;
    uint32_t p = parent[wv];
    ancestor[wv] = p;
    for (uint32_t v = bhead[p]; v; v = bnext[v]) {
      uint32_t u = v;
      if (ancestor[v]) {
        uint32_t sp = 0, x = v;
        while (ancestor[ancestor[x]]) {
          stack[sp++] = x;
          x = ancestor[x];
        }
        while (sp) {
          x = stack[--sp];
          uint32_t a = ancestor[x];
          if (semi[label[a]] < semi[label[x]]) label[x] = label[a];
          ancestor[x] = ancestor[a];
        }
        u = label[v];
      }
      idom[v] = semi[u] < semi[v] ? u : p;
    }
    bhead[p] = 0;
  }
  for (uint32_t i = 2; i <= count; i++)
    if (idom[i] != semi[i]) idom[i] = idom[idom[i]];

  /* Retained bytes: each subtree summed into its dominator, children
   * (higher dfs numbers) first. */
  for (uint32_t i = count; i >= 2; i--) {
    uint32_t node = vertex[i];
    if (node > R) {
      ret[i] += ur_walker_size(w, node - R - 1);
      cnt[i] += 1;
    }
    ret[idom[i]] += ret[i];
    cnt[idom[i]] += cnt[i];
  }
  for (uint32_t r = 0; r < R; r++) {
    uint32_t d = dfnum[1 + r];
    region_bytes[r] = d ? ret[d] : 0;
    region_count[r] = d ? cnt[d] : 0;
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t d = dfnum[R + 1 + i];
    if (!d) {
      idom_out[i] = UR_IDOM_UNREACHED;
      retained[i] = retained_count[i] = 0;
      continue;
    }
    uint32_t dom = vertex[idom[d]];
    idom_out[i] = dom == 0 ? UR_IDOM_SHARED : dom <= R ? UR_IDOM_REGION(dom - 1)
                                                       : (int64_t)(dom - R - 1);
    retained[i] = ret[d];
    retained_count[i] = cnt[d];
  }
  rc = 0;
out:
  ur_big_free(hoff);
  ur_big_free(poff);
  ur_big_free(dfnum);
  ur_big_free(vertex);
  ur_big_free(parent);
  ur_big_free(semi);
  ur_big_free(idom);
  ur_big_free(ancestor);
  ur_big_free(label);
  ur_big_free(bhead);
  ur_big_free(bnext);
  ur_big_free(stack);
  ur_big_free(spos);
  ur_big_free(ret);
  ur_big_free(cnt);
  ur_big_free(padj);
  return rc;
}

/* A block's top: the region below the virtual root whose subtree holds it. */
static int64_t top_of(int64_t d) { return d == UR_IDOM_SHARED ? d : -3 - d; }

void ur_retention_groups_free(struct ur_retention_groups *g) {
  ur_big_free(g->root_sites);
  ur_big_free(g->sites);
  ur_big_free(g->holders);
  memset(g, 0, sizeof(*g));
}

/* Tops as small numbers for combined sort keys: SHARED 0, region r r + 1. */
static uint64_t top_number(int64_t top) { return top == UR_IDOM_SHARED ? 0 : (uint64_t)top + 1; }
static int64_t top_from_number(uint64_t t) { return t == 0 ? UR_IDOM_SHARED : (int64_t)t - 1; }

int ur_retention_group(const struct ur_walker *w, const int64_t *idom, const uint64_t *retained,
                       const uint64_t *retained_count, const int64_t *keys,
                       struct ur_retention_groups *out) {
  const uint64_t sign = UINT64_C(1) << 63;
  size_t n = w->n, cap = n ? n : 1;
  memset(out, 0, sizeof(*out));
  int64_t *top = ur_big_calloc(cap, sizeof(*top));
  uint32_t *path = ur_big_calloc(cap, sizeof(*path));
  uint64_t *sorted = ur_big_calloc(cap, sizeof(*sorted));
  uint32_t *kid = ur_big_calloc(cap, sizeof(*kid));
  uint32_t *which = ur_big_calloc(cap, sizeof(*which));
  uint64_t *first = ur_big_calloc(cap + 1, sizeof(*first));
  uint64_t *next = ur_big_calloc(cap, sizeof(*next));
  uint32_t *child = ur_big_calloc(cap, sizeof(*child));
  uint64_t *stack = ur_big_calloc(2 * cap, sizeof(*stack));
  uint32_t *active = NULL;
  uint64_t *best = NULL; /* per site: the most one of its topmost blocks retains */
  int64_t *distinct = NULL;
  int rc = -ENOMEM;
  if (!top || !path || !sorted || !kid || !which || !first || !next || !child || !stack) goto out;
  /* Tops, each chain resolved once. */
  const int64_t unknown = INT64_MIN;
  uint64_t max_top = 0;
  for (size_t i = 0; i < n; i++) top[i] = unknown;
  for (size_t i = 0; i < n; i++) {
    size_t len = 0, j = i;
    while (top[j] == unknown && idom[j] >= 0) {
      path[len++] = (uint32_t)j;
      j = (size_t)idom[j];
    }
    if (top[j] == unknown)
      top[j] = idom[j] == UR_IDOM_UNREACHED ? UR_IDOM_UNREACHED : top_of(idom[j]);
    while (len) top[path[--len]] = top[j];
    if (top[i] != UR_IDOM_UNREACHED && top_number(top[i]) > max_top) max_top = top_number(top[i]);
  }
  /* Sites: the distinct keys of the reachable blocks (radix-sorted with
   * the sign bit flipped), then each block's. */
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (top[i] != UR_IDOM_UNREACHED) sorted[k++] = (uint64_t)keys[i] ^ sign;
  if (ur_radix_sort(sorted, NULL, k) < 0) goto out;
  size_t nk = 0;
  for (size_t i = 0; i < k; i++)
    if (!nk || sorted[i] != sorted[nk - 1]) sorted[nk++] = sorted[i];
  distinct = ur_big_calloc(nk ? nk : 1, sizeof(*distinct));
  out->sites = ur_big_calloc(nk ? nk : 1, sizeof(*out->sites));
  active = ur_big_calloc(nk ? nk : 1, sizeof(*active));
  best = ur_big_calloc(nk ? nk : 1, sizeof(*best));
  if (!distinct || !out->sites || !active || !best) goto out;
  for (size_t s = 0; s < nk; s++) distinct[s] = out->sites[s].key = (int64_t)(sorted[s] ^ sign);
  out->nsites = nk;
  /* (top, site) of every reachable block, as one sortable number. */
  const uint64_t tops = max_top + 1;
  size_t np = 0;
  for (size_t i = 0; i < n; i++) {
    if (top[i] == UR_IDOM_UNREACHED) continue;
    size_t lo = 0, hi = nk;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (distinct[mid] < keys[i]) lo = mid + 1;
      else hi = mid;
    }
    kid[i] = (uint32_t)lo;
    out->sites[lo].bytes += ur_walker_size(w, i);
    out->sites[lo].count++;
    sorted[np] = top_number(top[i]) * nk + lo;
    which[np++] = (uint32_t)i;
  }
  if (ur_radix_sort(sorted, which, np) < 0) goto out;
  size_t groups = 0;
  for (size_t i = 0; i < np; i++) groups += !i || sorted[i] != sorted[i - 1];
  out->root_sites = ur_big_calloc(groups ? groups : 1, sizeof(*out->root_sites));
  if (!out->root_sites) goto out;
  for (size_t i = 0, g = 0; i < np; i++) {
    if (i && sorted[i] != sorted[i - 1]) g++;
    struct ur_root_site *r = &out->root_sites[g];
    r->top = top_from_number(sorted[i] / nk);
    r->key = distinct[sorted[i] % nk];
    r->bytes += ur_walker_size(w, which[i]);
    r->count++;
  }
  out->nroot_sites = groups;
  /* The dominator tree's children, then a walk of it that knows which
   * sites are on the path from the top: a block with none of its own site
   * above it heads a subtree its site retains. */
  for (size_t i = 0; i < n; i++)
    if (idom[i] >= 0) first[idom[i] + 1]++;
  for (size_t i = 0; i < n; i++) first[i + 1] += first[i];
  memcpy(next, first, n * sizeof(*next));
  for (size_t i = 0; i < n; i++)
    if (idom[i] >= 0) child[next[idom[i]]++] = (uint32_t)i;
  np = 0;
  const uint64_t exit_mark = UINT64_C(1) << 63;
  for (size_t r = 0; r < n; r++) {
    if (idom[r] >= 0 || idom[r] == UR_IDOM_UNREACHED) continue;
    size_t depth = 0;
    stack[depth++] = r;
    while (depth) {
      uint64_t e = stack[--depth];
      size_t i = (size_t)(e & ~exit_mark);
      if (e & exit_mark) {
        active[kid[i]]--;
        continue;
      }
      if (!active[kid[i]]) {
        struct ur_site_total *s = &out->sites[kid[i]];
        s->retained_bytes += retained[i];
        s->retained_count += retained_count[i];
        if (retained[i] > best[kid[i]]) {
          best[kid[i]] = retained[i];
          s->largest = ur_walker_begin(w, i);
        }
        sorted[np] = (uint64_t)kid[i] * tops + top_number(top[i]);
        which[np++] = (uint32_t)i;
      }
      active[kid[i]]++;
      stack[depth++] = i | exit_mark;
      for (uint64_t c = first[i]; c < first[i + 1]; c++) stack[depth++] = child[c];
    }
  }
  if (ur_radix_sort(sorted, which, np) < 0) goto out;
  groups = 0;
  for (size_t i = 0; i < np; i++) groups += !i || sorted[i] != sorted[i - 1];
  out->holders = ur_big_calloc(groups ? groups : 1, sizeof(*out->holders));
  if (!out->holders) goto out;
  for (size_t i = 0, g = 0; i < np; i++) {
    if (i && sorted[i] != sorted[i - 1]) g++;
    struct ur_site_holder *h = &out->holders[g];
    h->key = distinct[sorted[i] / tops];
    h->top = top_from_number(sorted[i] % tops);
    h->bytes += retained[which[i]];
    h->count += retained_count[which[i]];
  }
  out->nholders = groups;
  rc = 0;
out:
  ur_big_free(top);
  ur_big_free(path);
  ur_big_free(sorted);
  ur_big_free(kid);
  ur_big_free(which);
  ur_big_free(first);
  ur_big_free(next);
  ur_big_free(child);
  ur_big_free(stack);
  ur_big_free(active);
  ur_big_free(best);
  ur_big_free(distinct);
  if (rc) ur_retention_groups_free(out);
  return rc;
}
