/*
 * Which processes process_vm_readv may read now: those whose every thread
 * this scanner holds stopped (memory.c read_span). Its read-only pin makes
 * the kernel unshare an anonymous page the process shares copy-on-write,
 * so a page is pinned only where the pagemap said the process maps it
 * alone; a running process may fork between that pagemap read and the pin,
 * and the pin would then copy pages it now shares with the child. A
 * stopped one cannot fork, and the gate is shut (waiting out the reads in
 * progress) before any of its threads runs again.
 */
#ifndef UR_PIN_GATE_H
#define UR_PIN_GATE_H

#include <sys/types.h>

/* Every thread of pid is stopped by this process: its pages may be pinned. */
void ur_pin_allow(pid_t pid);

/* A thread of pid is about to run (release, a run out of malloc, the
 * helper's snapshot clone): no new pin, and returns once the reads that
 * passed the gate are done. */
void ur_pin_forbid(pid_t pid);

/* Enter before the pagemap read: a token (> 0) while pid's pages may be
 * pinned, to hand to ur_pin_leave once the pin is done; 0: read through
 * /proc/PID/mem. */
int ur_pin_enter(pid_t pid);
void ur_pin_leave(int token);

#endif
