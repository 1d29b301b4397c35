/*
 * sigaltstack() recorded where the scanner can read it (abi.h ur_altstack).
 */
#ifndef UR_ALTSTACK_H
#define UR_ALTSTACK_H

#include <stdint.h>

int ur_altstacks_init(void);
/* fork child: only the forking thread survives, as new_tid. */
void ur_altstacks_after_fork_child(uint32_t old_tid, uint32_t new_tid);

#endif
