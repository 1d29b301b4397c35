/*
 * Write tracking for the scanner's "copy" snapshots (abi.h, struct
 * ur_write_tracker): the helper thread opens an asynchronous userfaultfd
 * and write-protects the process's private writable memory with it (or
 * leaves that to the scanner, UR_TRACK_MODE_SCANNER), so that the scanner can
 * copy that memory while the process runs and, in a short stop, re-read only
 * the pages written since. The process sees one minor fault per page it
 * writes while a scan copies; nothing is left behind (docs/pause.md).
 */
#ifndef UR_WRITE_TRACKING_H
#define UR_WRITE_TRACKING_H

#include <stdint.h>

#include "unreachable/abi.h"

extern struct ur_write_tracker ur_write_tracker;

/* The tracker word's value now (for the helper's futex wait), and whether
 * it asks the helper to start. */
uint32_t ur_write_tracking_word(void);
int ur_write_tracking_requested(void);

/* The helper starts tracking on a START and reports ON or FAILED; then,
 * serving snapshots and requests meanwhile, it calls check at least every
 * interval check returns (ns; 0 once tracking is over), which stops the
 * tracking when the scanner says STOP, has vanished, or overstays. */
void ur_write_tracking_begin(void);
int ur_write_tracking_active(void);
/* Tracking for a copy-on-write snapshot: requests wait until it ends. */
int ur_write_tracking_cow(void);
uint64_t ur_write_tracking_check(void);

/* fork child: a tracker inherited mid-scan is the parent's. */
void ur_write_tracking_after_fork_child(void);

#endif
