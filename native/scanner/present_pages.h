/*
 * Which parts of some ranges of a process hold pages at all (present or
 * swapped out), from /proc/PID/pagemap's PAGEMAP_SCAN (Linux 6.7). An
 * anonymous page that was never touched is zero and needs no scanning:
 * trimming root ranges to what exists keeps a sparse reservation (64 GiB
 * reserved, a few pages used) from costing a scan of all of it.
 */
#ifndef UR_SCANNER_PRESENT_PAGES_H
#define UR_SCANNER_PRESENT_PAGES_H

#include <stddef.h>
#include <stdint.h>

/* The parts of the sorted (begin, end) pairs `in` that hold pages, as pairs
 * in *out (malloc'ed; *n_out of them). Returns 0, or -errno (-ENOTTY or
 * -EINVAL: a kernel without PAGEMAP_SCAN). */
int ur_present_pages(int pagemap_fd, const uint64_t *in, size_t n, uint64_t **out, size_t *n_out);

#endif
