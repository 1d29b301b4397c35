/*
 * The in-child sweep (abi.h struct ur_child_box): the snapshot child sweeps
 * its own copy of the process instead of being read from outside.
 */
#ifndef UR_SHIM_CHILD_H
#define UR_SHIM_CHILD_H

#include "unreachable/abi.h"

extern struct ur_child_box ur_child_box;

/* In the freshly cloned snapshot child: returns at once unless the scanner
 * wrote UR_CHILD_GO into this copy's box; otherwise serves the scanner and
 * never returns. The caller exits either way. */
void ur_child_run(void);

#endif
