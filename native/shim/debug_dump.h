/*
 * Heap dumps and leak_track (debug_dump.c).
 */
#ifndef UR_DEBUG_DUMP_H
#define UR_DEBUG_DUMP_H

/* Every live block, grouped by size and allocation backtrace, then the
 * maps, in bionic's heap dump format. */
void ur_dump_heap(const char *path);

/* leak_track: one report per live block, largest first. */
void ur_log_leaks(void);

#endif
