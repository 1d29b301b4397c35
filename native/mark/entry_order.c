#include "entry_order.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "radix_sort.h"
#include "registry_walk.h"

/* Whether any two of the n ranges [begin, begin + len) overlap, or one is
 * empty or wraps: 1, 0, or -ENOMEM. */
static int ranges_overlap(const uint64_t *begins, const uint64_t *lens, size_t n) {
  uint64_t *keys = ur_big_calloc(n ? n : 1, sizeof(*keys));
  uint32_t *order = ur_big_calloc(n ? n : 1, sizeof(*order));
  int rc = -ENOMEM;
  if (!keys || !order || n > UINT32_MAX) goto out;
  for (size_t i = 0; i < n; i++) {
    keys[i] = begins[i];
    order[i] = (uint32_t)i;
  }
  if ((rc = ur_radix_sort(keys, order, n)) != 0) goto out;
  uint64_t reached = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    uint64_t b = begins[order[i]], e = b + lens[order[i]];
    if (e <= b || (i && b < reached)) rc = 1;
    reached = e;
  }
out:
  ur_big_free(keys);
  ur_big_free(order);
  return rc;
}

int ur_registry_forged(const struct ur_shard *shards, uint32_t nshards,
                       const struct ur_size_map_ref *refs, uint64_t nrefs) {
  const uint64_t span = UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT;
  size_t most = nshards > nrefs ? nshards : (size_t)nrefs;
  uint64_t *begins = ur_big_calloc(most ? most : 1, sizeof(*begins));
  uint64_t *lens = ur_big_calloc(most ? most : 1, sizeof(*lens));
  int rc = -ENOMEM;
  if (!begins || !lens) goto out;
  size_t n = 0;
  for (uint32_t s = 0; s < nshards; s++) {
    uint64_t table, cap;
    if (!ur_registry_table(&shards[s], &table, &cap)) continue;
    begins[n] = table;
    lens[n++] = cap * sizeof(struct ur_entry);
  }
  if ((rc = ranges_overlap(begins, lens, n)) != 0) {
    rc = rc > 0 ? UR_FORGED_TABLES : rc;
    goto out;
  }
  for (int pass = 0; pass < 2 && rc == 0; pass++) {
    n = 0;
    for (uint64_t k = 0; k < nrefs; k++) {
      if (!refs[k].map) continue;
      if (refs[k].base & (span - 1)) rc = 1;
      begins[n] = pass ? refs[k].map : refs[k].base;
      lens[n++] = pass ? UR_SIZE_MAP_BYTES : span;
    }
    if (rc == 0) rc = ranges_overlap(begins, lens, n);
    if (rc > 0) rc = UR_FORGED_MAPS;
  }
out:
  ur_big_free(begins);
  ur_big_free(lens);
  return rc;
}

int ur_size_map_order(const struct ur_size_map_ref *refs, size_t n, uint32_t **order) {
  uint64_t *bases = ur_big_calloc(n ? n : 1, sizeof(*bases));
  *order = ur_big_calloc(n ? n : 1, sizeof(**order));
  int rc = -ENOMEM;
  if (!bases || !*order || n > UINT32_MAX) goto out;
  for (size_t i = 0; i < n; i++) {
    bases[i] = refs[i].base;
    (*order)[i] = (uint32_t)i;
  }
  rc = ur_radix_sort(bases, *order, n);
out:
  ur_big_free(bases);
  if (rc) {
    ur_big_free(*order);
    *order = NULL;
  }
  return rc;
}

/* The n pairs and ids, stably sorted by begin, written to out_pairs and
 * out_ids (which may be pairs and ids themselves). */
static int sort_into(const uint64_t *pairs, const uint32_t *ids, size_t n, uint64_t *out_pairs,
                     uint32_t *out_ids) {
  uint64_t *keys = ur_big_calloc(n, sizeof(*keys));
  uint32_t *order = ur_big_calloc(n, sizeof(*order));
  uint64_t *sorted = out_pairs == pairs ? ur_big_calloc(2 * n, sizeof(*sorted)) : out_pairs;
  uint32_t *sorted_ids = out_ids == ids ? ur_big_calloc(n, sizeof(*sorted_ids)) : out_ids;
  int rc = -ENOMEM;
  if (!keys || !order || !sorted || !sorted_ids) goto out;
  for (size_t i = 0; i < n; i++) {
    keys[i] = pairs[2 * i];
    order[i] = (uint32_t)i;
  }
  if ((rc = ur_radix_sort(keys, order, n)) != 0) goto out;
  for (size_t i = 0; i < n; i++) {
    sorted[2 * i] = keys[i];
    sorted[2 * i + 1] = pairs[2 * order[i] + 1];
    sorted_ids[i] = ids[order[i]];
  }
  if (sorted != out_pairs) memcpy(out_pairs, sorted, 2 * n * sizeof(*sorted));
  if (sorted_ids != out_ids) memcpy(out_ids, sorted_ids, n * sizeof(*sorted_ids));
out:
  ur_big_free(keys);
  ur_big_free(order);
  if (sorted != out_pairs) ur_big_free(sorted);
  if (sorted_ids != out_ids) ur_big_free(sorted_ids);
  return rc;
}

int ur_entries_order(uint64_t *pairs, uint32_t *ids, size_t n, size_t sorted_from) {
  if (n < 2) return 0;
  if (n > UINT32_MAX) return -ENOMEM;
  size_t m = sorted_from < n ? sorted_from : n;
  /* The maps' part is in order unless the registry is damaged (it is the
   * target's memory): then everything is sorted. */
  for (size_t j = m + 1; j < n; j++)
    if (pairs[2 * (j - 1)] > pairs[2 * j]) return sort_into(pairs, ids, n, pairs, ids);
  if (m == 0) return 0;
  if (m == n) return sort_into(pairs, ids, n, pairs, ids);
  /* The shards' part, sorted aside... */
  uint64_t *a = ur_big_calloc(2 * m, sizeof(*a));
  uint32_t *a_ids = ur_big_calloc(m, sizeof(*a_ids));
  int rc = -ENOMEM;
  if (!a || !a_ids) goto out;
  if ((rc = sort_into(pairs, ids, m, a, a_ids)) != 0) goto out;
  /* ...then merged forward in place: the slot written, i + (j - m), never
   * passes the maps' entry read next, j. On equal begins the shards' entry
   * comes first, as a stable sort of the whole would put it. */
  size_t i = 0, j = m, w = 0;
  while (i < m) {
    if (j < n && pairs[2 * j] < a[2 * i]) {
      pairs[2 * w] = pairs[2 * j];
      pairs[2 * w + 1] = pairs[2 * j + 1];
      ids[w++] = ids[j++];
    } else {
      pairs[2 * w] = a[2 * i];
      pairs[2 * w + 1] = a[2 * i + 1];
      ids[w++] = a_ids[i++];
    }
  }
out:
  ur_big_free(a);
  ur_big_free(a_ids);
  return rc;
}

int ur_entries_order_maps_first(uint64_t *pairs, uint32_t *ids, size_t n, size_t unsorted_from) {
  if (n < 2) return 0;
  if (n > UINT32_MAX) return -ENOMEM;
  size_t k = unsorted_from < n ? unsorted_from : n, m = n - k;
  int in_order = 1;
  for (size_t j = 1; j < k && in_order; j++) in_order = pairs[2 * (j - 1)] <= pairs[2 * j];
  if (!m && in_order) return 0;
  uint64_t *a = ur_big_calloc(2 * (m ? m : 1), sizeof(*a));
  uint32_t *a_ids = ur_big_calloc(m ? m : 1, sizeof(*a_ids));
  int rc = -ENOMEM;
  if (!a || !a_ids) goto out;
  if (!in_order || !k) {
    /* A damaged registry (or shards only): the shards' part moved to the
     * front, as ur_entries_order takes it, so that ties sort the same. */
    memcpy(a, pairs + 2 * k, 2 * m * sizeof(*a));
    memcpy(a_ids, ids + k, m * sizeof(*a_ids));
    memmove(pairs + 2 * m, pairs, 2 * k * sizeof(*pairs));
    memmove(ids + m, ids, k * sizeof(*ids));
    memcpy(pairs, a, 2 * m * sizeof(*a));
    memcpy(ids, a_ids, m * sizeof(*a_ids));
    rc = ur_entries_order(pairs, ids, n, m);
    goto out;
  }
  if ((rc = sort_into(pairs + 2 * k, ids + k, m, a, a_ids)) != 0) goto out;
  /* Merged backward in place: the slot written, i + j - 1, never falls
   * below the maps' entry read next, j - 1; once the shards' entries are
   * placed, the maps' entries below them are where they belong. On equal
   * begins the shards' entry comes first, as ur_entries_order puts it. */
  size_t i = m, j = k;
  while (i > 0) {
    size_t w = i + j - 1;
    if (j > 0 && pairs[2 * (j - 1)] >= a[2 * (i - 1)]) {
      j--;
      pairs[2 * w] = pairs[2 * j];
      pairs[2 * w + 1] = pairs[2 * j + 1];
      ids[w] = ids[j];
    } else {
      i--;
      pairs[2 * w] = a[2 * i];
      pairs[2 * w + 1] = a[2 * i + 1];
      ids[w] = a_ids[i];
    }
  }
out:
  ur_big_free(a);
  ur_big_free(a_ids);
  return rc;
}
