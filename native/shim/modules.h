/*
 * The loaded objects' record (abi.h struct ur_module_table).
 */
#ifndef UR_MODULES_H
#define UR_MODULES_H

#include <stdint.h>

/* At start-up, with backtraces: the table (descriptor.modules). Never
 * fails: without memory nothing is recorded. */
void ur_modules_init(void);

/* Before a new backtrace is stored: record the objects loaded since the
 * loader's adds/subs counters were last seen. One dl_iterate_phdr call
 * that stops at its first object when nothing changed; never allocates. */
void ur_modules_note(void);

#endif
