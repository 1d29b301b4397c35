/*
 * malloc_debug's life cycle (debug_setup.c), called by start-up (shim.c):
 * configure, start, fork child, exit.
 */
#ifndef UR_DEBUG_SETUP_H
#define UR_DEBUG_SETUP_H

#include "options.h"

/* ur_init, once options parsed: sets ur_g.debug (0 when no per-call option),
 * reserves the FIFO and record arrays from the region. Returns -1 if the
 * region cannot hold them, else 1 if the debug path is needed, 0 if not. */
int ur_debug_configure(const struct ur_options *o);

/* Constructor: install the signal handlers, print the verbose "Run:" lines. */
void ur_debug_start(const char *progname);

/* Process exit (the shim's destructor): free_track verification, leak_track,
 * backtrace_dump_on_exit, record_allocs_on_exit, log_allocator_stats_on_exit. */
void ur_debug_at_exit(void);

/* fork child: reset the locks other threads may have held. */
void ur_debug_after_fork_child(void);

#endif
