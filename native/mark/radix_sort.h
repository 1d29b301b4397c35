/*
 * LSD radix sort for the mark core's large arrays (10M allocation addresses):
 * qsort with a comparator costs seconds there, this costs tens of ms.
 */
#ifndef UR_MARK_RADIX_SORT_H
#define UR_MARK_RADIX_SORT_H

#include <stddef.h>
#include <stdint.h>

/* Stable ascending sort of keys, permuting vals (may be NULL) alongside;
 * keys already in order cost one read. Returns 0 or -ENOMEM (arrays
 * untouched then). */
int ur_radix_sort(uint64_t *keys, uint32_t *vals, size_t n);

#endif
