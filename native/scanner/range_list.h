/*
 * A growing, malloc'ed list of sorted (begin, end) pairs, the shape every
 * page walk of the scanner returns: pushed, a range that starts where the
 * last one ends extends it, so runs of pages come back as one pair.
 */
#ifndef UR_SCANNER_RANGE_LIST_H
#define UR_SCANNER_RANGE_LIST_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Appends [b, e) as a pair of its own to the *n pairs of *v (room for
 * *cap, grown by doubling). 0, or -ENOMEM (the list as it was). */
static inline int ur_ranges_append(uint64_t **v, size_t *n, size_t *cap, uint64_t b, uint64_t e) {
  if (*n == *cap) {
    size_t grown = *cap ? *cap * 2 : 64;
    uint64_t *p = realloc(*v, grown * 2 * sizeof(uint64_t));
    if (!p) return -ENOMEM;
    *v = p;
    *cap = grown;
  }
  (*v)[2 * *n] = b;
  (*v)[2 * *n + 1] = e;
  (*n)++;
  return 0;
}

/* As ur_ranges_append, but a range that starts where the last one ends
 * extends it. */
static inline int ur_ranges_push(uint64_t **v, size_t *n, size_t *cap, uint64_t b, uint64_t e) {
  if (*n && (*v)[2 * *n - 1] == b) {
    (*v)[2 * *n - 1] = e;
    return 0;
  }
  return ur_ranges_append(v, n, cap, b, e);
}

#endif
