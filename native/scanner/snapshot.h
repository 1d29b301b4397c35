/*
 * Copy-on-write snapshot through the shim's helper thread (abi.h,
 * ur_helper_cmd): with every thread stopped, the helper alone is resumed to
 * run a raw clone(flags=0). The child is a fork of the stopped process whose
 * memory is frozen as of the stop; it is auto-attached to us, never runs,
 * and is read through /proc/CHILD/mem while the target runs again. The pause
 * is then the page-table copy, not the whole scan.
 *
 * The only write into the target is the command word.
 */
#ifndef UR_SCANNER_SNAPSHOT_H
#define UR_SCANNER_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "thread_capture.h"

/*
 * c: a capture with all threads stopped (ur_capture_stop). On success returns
 * the child's pid; the helper is detached (it waits in wait4 for the child)
 * and every other thread is still stopped. On failure returns -errno with err
 * set; the helper is stopped again when possible and the command word is back
 * to UR_CMD_IDLE if the helper never took it, so the caller can scan the
 * stopped target directly instead.
 */
pid_t ur_snapshot_take(struct ur_capture *c, pid_t helper_tid, uint64_t cmd_addr, char *err,
                       size_t errlen);

/* SIGKILL the frozen child and reap our ptrace notification (its parent, the
 * helper, reaps the zombie). Returns 0 or -errno. */
int ur_snapshot_close(pid_t child);

/* The closed child is a zombie until the helper reaps it, and the helper's
 * command word stays UR_CMD_SNAPSHOT until then. In a process stopped by
 * SIGSTOP the helper cannot run: this runs it alone (every signal blocked)
 * until it has reaped the child, and puts it back into its group stop. A
 * running helper reaps by itself: nothing is done then. Returns 0 or -errno. */
int ur_snapshot_reap(pid_t pid, pid_t helper_tid, uint64_t cmd_addr);

/* Thread tid's state letter in /proc/PID/task/TID/stat ('R', 'S', 'T',
 * 'Z', ...), 0 where it cannot be read (gone). */
char ur_thread_state(pid_t pid, pid_t tid);

#endif
