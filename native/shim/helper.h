/*
 * The snapshot helper thread (abi.h ur_helper_cmd): on UR_CMD_SNAPSHOT it
 * clones a copy-on-write image of the process for the scanner to read.
 */
#ifndef UR_HELPER_H
#define UR_HELPER_H

/* Start the helper; safe to call from the constructor or an allocation path. */
void ur_helper_start(void);

/* fork child: the helper did not survive; the next allocation starts one. */
void ur_helper_after_fork_child(void);

#endif
