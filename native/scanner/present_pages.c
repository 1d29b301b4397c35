#include "present_pages.h"

#include <errno.h>
#include <stdlib.h>

#include "range_list.h"
#include "unreachable/write_protect.h"

#define VEC 512

int ur_present_pages(int pagemap_fd, const uint64_t *in, size_t n, uint64_t **out, size_t *n_out) {
  struct page_region vec[VEC];
  uint64_t *v = NULL;
  size_t np = 0, cap = 0;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    uint64_t pos = in[2 * i] & ~(uint64_t)4095, end = in[2 * i + 1];
    while (rc == 0 && pos < end) {
      uint64_t walk_end;
      int got = ur_pages_ahead(pagemap_fd, pos, end, vec, VEC, &walk_end);
      if (got < 0 && errno == EFAULT) { /* not the process's to walk: keep it all */
        rc = ur_ranges_push(&v, &np, &cap, pos > in[2 * i] ? pos : in[2 * i], end);
        break;
      }
      if (got < 0 && errno == EIO) break; /* no progress: the rest of the range is gone */
      if (got < 0) {
        rc = -errno;
        break;
      }
      for (int k = 0; rc == 0 && k < got; k++) {
        /* The ranges need not be page aligned (a root after a hole). */
        uint64_t b = vec[k].start < in[2 * i] ? in[2 * i] : vec[k].start;
        uint64_t e = vec[k].end > end ? end : vec[k].end;
        if (e > b) rc = ur_ranges_push(&v, &np, &cap, b, e);
      }
      pos = walk_end;
    }
  }
  if (rc < 0) {
    free(v);
    return rc;
  }
  *out = v;
  *n_out = np;
  return 0;
}
