/*
 * /proc/self/maps, line by line, for the helper thread's own work (arena
 * collapsing, write tracking). Parsed from a static buffer: the helper
 * passes its allocations straight to glibc, but needs none here.
 */
#ifndef UR_SELF_MAPS_H
#define UR_SELF_MAPS_H

#include <stdint.h>

/* fn(lo, hi, rest, arg) for each mapping, rest being the line after
 * "lo-hi" (" perms offset dev inode [path]"); a non-zero return stops the
 * walk. Returns 0, or -errno if the maps could not be opened. Helper thread
 * only (one static buffer). */
typedef int (*ur_maps_fn)(uint64_t lo, uint64_t hi, const char *rest, void *arg);
int ur_self_maps_foreach(ur_maps_fn fn, void *arg);

/* Opens the maps to keep, while the process can (before a chroot); called
 * as a helper starts, by the thread starting it. */
void ur_self_maps_keep(void);
/* The parent's descriptor closed in a forked child. */
void ur_self_maps_after_fork_child(void);

/* The four permission characters of rest ("rw-p"), NUL-terminated in perms. */
int ur_maps_perms(const char *rest, char perms[5]);

/* The inode of rest's file; 0 for anonymous memory. */
uint64_t ur_maps_inode(const char *rest);

#endif
