/*
 * The mark core's memory backend inside the forked snapshot child: plain
 * loads from the child's own (copy-on-write) memory, only inside the ranges
 * the scanner listed as readable (its /proc/CHILD/maps, read before the child
 * ran). Anything else (a block on a PROT_NONE or unmapped page, device
 * memory) is read through /proc/self/mem a page at a time, exactly as the
 * scanner's reader would: what the kernel refuses reads as zero, counted
 * once per page. Never calls malloc: safe in the child.
 */
#ifndef UR_MARK_MEM_DIRECT_H
#define UR_MARK_MEM_DIRECT_H

#include <stddef.h>
#include <stdint.h>

#include "mem.h"

#define UR_DIRECT_RING 64 /* bounce pages: >= the walker's batch of views */

struct ur_direct_mem {
  struct ur_mem mem;       /* first: the walker holds &mem */
  uint64_t *ranges;        /* sorted, merged readable [begin, end) pairs */
  size_t nranges;
  int fd;                  /* /proc/self/mem, opened on first use; -1 before */
  uint8_t *ring;           /* UR_DIRECT_RING pages */
  unsigned ring_next;
  uint64_t *bad;           /* open-addressed set of counted bad page numbers + 1 */
  size_t bad_mask, bad_n;
  uint64_t bounced;        /* pages read through /proc/self/mem */
  /* Private anonymous memory, sorted [begin, end) pairs, read from
   * /proc/self/maps on first need (mem.present): only there does a page
   * that does not exist read as zero. anon_state: 0 not read, 1 read, -1
   * unknown (then nothing is skipped). */
  uint64_t *anon;
  size_t nanon;
  int anon_state;
  int pagemap_fd; /* /proc/self/pagemap, opened on first use; -1 before, -2 unusable */
};

/* ranges: n readable (begin, end) pairs in any order; copied, sorted and
 * merged. Returns 0 or -ENOMEM. */
int ur_direct_open(struct ur_direct_mem *d, const uint64_t *ranges, size_t n);
void ur_direct_close(struct ur_direct_mem *d);

/* Whether [addr, addr+1) lies in a listed readable range. */
int ur_direct_readable(const struct ur_direct_mem *d, uint64_t addr);

/*
 * Process-wide (the snapshot child's): a SIGSEGV or SIGBUS on a load inside
 * one of d's listed ranges (a file truncated under its mapping, a page the
 * kernel refuses) maps a zero page over the faulting page, counts it, and the
 * load is retried: the same zero /proc/PID/mem would have given. Any other
 * fault kills as usual. Unblocks both signals. d must outlive the handler
 * (NULL uninstalls the repair: faults kill).
 */
void ur_direct_catch_faults(struct ur_direct_mem *d);

#endif
