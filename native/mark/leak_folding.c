#include "leak_folding.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"

#define NONE UINT32_MAX
/* At most one block in this many unreachable: nodes found by a search. */
#define FEW_UNREACHABLE 64

struct frame {
  uint32_t v;
  size_t ep; /* next edge of v to visit */
};

/* Iterative Tarjan. SCC ids come out in reverse topological order: an edge
 * between two SCCs always goes from a higher id to a lower one. */
static int tarjan(size_t n, const size_t *off, const uint32_t *adj, uint32_t *scc_of,
                  size_t *nscc_out) {
  uint32_t *index = ur_big_calloc(1, n * sizeof(*index));
  uint32_t *low = ur_big_calloc(1, n * sizeof(*low));
  uint32_t *stack = ur_big_calloc(1, n * sizeof(*stack));
  struct frame *frames = ur_big_calloc(1, n * sizeof(*frames));
  if (!index || !low || !stack || !frames) {
    ur_big_free(index);
    ur_big_free(low);
    ur_big_free(stack);
    ur_big_free(frames);
    return -ENOMEM;
  }
  /* scc_of doubles as the on-stack flag: NONE while on the Tarjan stack. */
  for (size_t i = 0; i < n; i++) {
    index[i] = NONE;
    scc_of[i] = NONE;
  }
  uint32_t counter = 0, nscc = 0;
  size_t sp = 0, fp = 0;
  for (size_t r = 0; r < n; r++) {
    if (index[r] != NONE) continue;
    index[r] = low[r] = counter++;
    stack[sp++] = (uint32_t)r;
    frames[fp++] = (struct frame){(uint32_t)r, off[r]};
    while (fp) {
      struct frame *f = &frames[fp - 1];
      uint32_t v = f->v;
      if (f->ep < off[v + 1]) {
        uint32_t t = adj[f->ep++];
        if (index[t] == NONE) {
          index[t] = low[t] = counter++;
          stack[sp++] = t;
          frames[fp++] = (struct frame){t, off[t]};
        } else if (scc_of[t] == NONE && index[t] < low[v]) {
          low[v] = index[t];
        }
        continue;
      }
      fp--;
      if (low[v] == index[v]) {
        uint32_t x;
        do {
          x = stack[--sp];
          scc_of[x] = nscc;
        } while (x != v);
        nscc++;
      }
      if (fp) {
        uint32_t p = frames[fp - 1].v;
        if (low[v] < low[p]) low[p] = low[v];
      }
    }
  }
  ur_big_free(index);
  ur_big_free(low);
  ur_big_free(stack);
  ur_big_free(frames);
  *nscc_out = nscc;
  return 0;
}

int ur_fold_graph(size_t n, const uint64_t *size, const size_t *off, const uint32_t *adj,
                  struct ur_leak **leaks_out, size_t *nleaks_out) {
  *leaks_out = NULL;
  *nleaks_out = 0;
  if (n == 0) return 0;
  int rc = -ENOMEM;
  size_t nscc = 0;
  uint32_t *scc_of = ur_big_calloc(1, n * sizeof(*scc_of));
  uint32_t *owner = ur_big_calloc(1, n * sizeof(*owner));
  uint32_t *queue = ur_big_calloc(1, n * sizeof(*queue));
  uint8_t *entered = NULL;
  struct ur_leak *leaks = NULL;
  if (!scc_of || !owner || !queue) goto out;
  if ((rc = tarjan(n, off, adj, scc_of, &nscc)) < 0) goto out;
  rc = -ENOMEM;
  if (!(entered = ur_big_calloc(nscc, 1))) goto out;

  /* A component that another one points into is below it: not a leak root. */
  for (size_t v = 0; v < n; v++)
    for (size_t k = off[v]; k < off[v + 1]; k++)
      if (scc_of[adj[k]] != scc_of[v]) entered[scc_of[adj[k]]] = 1;

  /* Every member of a component nothing points into is a leak of its own,
   * in node (address) order; they start the search below at distance 0. */
  size_t nleaks = 0, qt = 0;
  for (size_t v = 0; v < n; v++) {
    owner[v] = NONE;
    if (!entered[scc_of[v]]) {
      owner[v] = (uint32_t)nleaks++;
      queue[qt++] = (uint32_t)v;
    }
  }
  leaks = ur_big_calloc(1, nleaks * sizeof(*leaks));
  if (!leaks) goto out;
  for (size_t k = 0; k < nleaks; k++) leaks[k].index = queue[k];

  /* One breadth-first search from all the leaks at once: each other block
   * goes to the leak that reaches it in the fewest pointers, among equally
   * near ones the lowest (the queue keeps each level in the order of its
   * owners), so every block counts under exactly one leak. A block below a
   * single component goes to one of its members: nothing else reaches it. */
  for (size_t qh = 0; qh < qt; qh++) {
    uint32_t u = queue[qh];
    struct ur_leak *l = &leaks[owner[u]];
    for (size_t k = off[u]; k < off[u + 1]; k++) {
      uint32_t t = adj[k];
      if (owner[t] != NONE) continue;
      owner[t] = owner[u];
      queue[qt++] = t;
      l->referenced_count++;
      l->referenced_size += size[t];
    }
  }
  *leaks_out = leaks;
  *nleaks_out = nleaks;
  leaks = NULL;
  rc = 0;
out:
  ur_big_free(scc_of);
  ur_big_free(owner);
  ur_big_free(queue);
  ur_big_free(entered);
  ur_big_free(leaks);
  return rc;
}

struct edge_ctx {
  struct ur_walker *w;
  const uint32_t *node_of; /* per block, or NULL: search sorted_idx */
  const uint32_t *sorted_idx;
  size_t n;
  uint32_t self;
  uint32_t *adj;
  size_t nadj, cap;
};

/* The unreachable block idx's node, or NONE for a marked block. */
static uint32_t node_of(const struct edge_ctx *c, size_t idx) {
  if (c->node_of) return c->node_of[idx];
  if (c->w->marked[idx]) return NONE;
  size_t lo = 0, hi = c->n; /* sorted_idx ascends */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c->sorted_idx[mid] < idx) lo = mid + 1;
    else hi = mid;
  }
  return (uint32_t)lo; /* unmarked, so present */
}

static int edge_hit(void *p, size_t idx) {
  struct edge_ctx *c = p;
  uint32_t t = node_of(c, idx);
  if (t == NONE || t == c->self) return 0;
  if (c->nadj == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 4096;
    uint32_t *a = ur_big_realloc(c->adj, cap * sizeof(*a));
    if (!a) return -ENOMEM;
    c->adj = a;
    c->cap = cap;
  }
  c->adj[c->nadj++] = t;
  return 0;
}

int ur_fold_leaks(struct ur_walker *w, uint32_t **unreachable_out, size_t *nunreachable_out,
                  struct ur_leak **leaks_out, size_t *nleaks_out) {
  *unreachable_out = NULL;
  *nunreachable_out = 0;
  *leaks_out = NULL;
  *nleaks_out = 0;
  size_t n = 0;
  for (size_t i = 0; i < w->n; i++) n += !w->marked[i];
  int rc = -ENOMEM;
  /* A node per block only where many are unreachable: with few, the edges
   * of the unreachable blocks are few, and a search of them costs less than
   * writing 4 bytes per block into fresh memory (17 MB at 4M blocks). */
  uint32_t *node_of = n > w->n / FEW_UNREACHABLE
                          ? ur_big_calloc(1, (w->n ? w->n : 1) * sizeof(*node_of))
                          : NULL;
  uint32_t *unreachable = ur_big_calloc(1, (n ? n : 1) * sizeof(*unreachable));
  uint32_t *sorted_idx = ur_big_calloc(1, (n ? n : 1) * sizeof(*sorted_idx));
  uint64_t *size = ur_big_calloc(1, (n ? n : 1) * sizeof(*size));
  size_t *off = ur_big_calloc(1, (n + 1) * sizeof(*off));
  struct edge_ctx ec = {.w = w};
  struct ur_leak *leaks = NULL;
  size_t nleaks = 0;
  if ((!node_of && n > w->n / FEW_UNREACHABLE) || !unreachable || !sorted_idx || !size || !off)
    goto out;
  size_t k = 0;
  for (size_t i = 0; i < w->n; i++) {
    if (w->marked[i]) {
      if (node_of) node_of[i] = NONE;
      continue;
    }
    if (node_of) node_of[i] = (uint32_t)k;
    sorted_idx[k] = (uint32_t)i;
    unreachable[k] = ur_walker_orig(w, i);
    size[k] = ur_walker_size(w, i);
    k++;
  }
  ec.node_of = node_of;
  ec.sorted_idx = sorted_idx;
  ec.n = n;
  for (size_t v = 0; v < n; v++) {
    off[v] = ec.nadj;
    ec.self = (uint32_t)v;
    uint32_t i = sorted_idx[v];
    if (w->has_graph && !ur_ref_graph_dense(&w->graph, i)) {
      size_t count;
      const uint32_t *to = ur_ref_graph_edges(&w->graph, i, &count);
      for (size_t e = 0; e < count; e++)
        if ((rc = edge_hit(&ec, to[e])) != 0) goto out;
    } else if ((rc = ur_walker_scan(w, ur_walker_begin(w, i), ur_walker_end(w, i), edge_hit, &ec)) != 0) {
      goto out;
    }
  }
  off[n] = ec.nadj;
  if ((rc = ur_fold_graph(n, size, off, ec.adj, &leaks, &nleaks)) < 0) goto out;
  for (size_t i = 0; i < nleaks; i++) leaks[i].index = unreachable[leaks[i].index];
  *unreachable_out = unreachable;
  *nunreachable_out = n;
  *leaks_out = leaks;
  *nleaks_out = nleaks;
  unreachable = NULL;
  leaks = NULL;
  rc = 0;
out:
  ur_big_free(node_of);
  ur_big_free(unreachable);
  ur_big_free(sorted_idx);
  ur_big_free(size);
  ur_big_free(off);
  ur_big_free(ec.adj);
  ur_big_free(leaks);
  return rc;
}
