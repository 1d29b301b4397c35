/*
 * The loaded objects' record (abi.h struct ur_module_table) and the paths
 * the shim's own reports give objects.
 */
#ifndef UR_MODULES_H
#define UR_MODULES_H

#include <stdint.h>

/* At start-up: the main program's path, and with backtraces the table
 * (descriptor.modules). Never fails: without memory nothing is recorded. */
void ur_modules_init(void);

/* Before a new backtrace is stored: record the objects loaded since the
 * loader's adds/subs counters were last seen. One dl_iterate_phdr call
 * that stops at its first object when nothing changed; never allocates. */
void ur_modules_note(void);

/* The path /proc/self/maps shows for an object dladdr named `name`: dladdr
 * names the main program by its argv[0] ("./prog"), bionic's reports by
 * its mapped file. Other names come back as they are. */
const char *ur_object_path(const char *name);

#endif
