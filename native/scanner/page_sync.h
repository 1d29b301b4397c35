/*
 * A copy of another process's memory kept true across a stop: the "copy"
 * snapshot (docs/pause.md). Ranges are copied into a chunk cache
 * (memory.h) while the process runs; stopped, it is asked which pages it
 * wrote since (PAGEMAP_SCAN on /proc/PID/pagemap, Linux 6.7: the shim's
 * helper write-protected its memory with an asynchronous userfaultfd) and
 * only those are read again. The pause then costs a page-table walk and the
 * pages written, not the heap.
 */
#ifndef UR_SCANNER_PAGE_SYNC_H
#define UR_SCANNER_PAGE_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "memory.h"

/* Flags of a range to sync. */
#define UR_SYNC_ANON 1u /* private anonymous: a page not present reads as zero */
/* Refreshing: only the pages the copy holds already are brought up to date;
 * the others stay out of it (and out of the zero ranges). One range of the
 * kernel's walk for a copy made of scattered pages of it. */
#define UR_SYNC_HELD 2u

struct ur_sync_range {
  uint64_t begin, end; /* page aligned */
  uint64_t flags;      /* UR_SYNC_* */
};

struct ur_sync_stats {
  uint64_t pages_read;   /* read from the process */
  uint64_t pages_zeroed; /* not present, private anonymous: zero without a read */
  uint64_t pages_kept;   /* copied before and not written since */
  uint64_t untracked;    /* pages read again because nothing tracked their writes */
};

/*
 * Bring the cache's copy of the ranges up to date. refresh=0 (the process
 * runs): every page is read, except that absent pages of anonymous ranges
 * are zeroed (reading them would fault them in). refresh=1 (the process is
 * stopped): pages synced before that the kernel reports neither written nor
 * gone since are kept, the rest as above, and pages synced before outside
 * the ranges now are dropped (unreadable after ur_sync_finish). Absent
 * anonymous pages take no room: a chunk the cache does not hold inside an
 * anonymous range of the last sync reads as zero (the ranges must come
 * sorted). Reads run on up to `threads`
 * threads. Returns 0, -ENOSPC if the cache cannot hold the ranges, or
 * -errno of the pagemap (-ENOTTY: a kernel without PAGEMAP_SCAN).
 */
int ur_sync(struct ur_pread_mem *m, int pagemap_fd, const struct ur_sync_range *ranges, size_t n,
            int refresh, unsigned threads, struct ur_sync_stats *st);

/* After the last sync: pages of held chunks that were never synced read as
 * unreadable (counted as skipped, as /proc/PID/mem would have them), and
 * nothing more is loaded (ur_mem_freeze). */
void ur_sync_finish(struct ur_pread_mem *m);

#endif
