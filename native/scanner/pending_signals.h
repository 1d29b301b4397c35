/*
 * Values the kernel holds in signals queued and not yet delivered.
 * sigqueue(), POSIX timers and message queue notifications carry a sigval,
 * and a program may hand a block to a thread that has the signal blocked
 * (or collects it with sigwaitinfo) and keep no other pointer to it: until
 * delivery only the kernel's queue holds it. Read from the stopped threads
 * with PTRACE_PEEKSIGINFO (each thread's queue and the process's) and, for
 * a thread stopped while delivering one, PTRACE_GETSIGINFO.
 */
#ifndef UR_SCANNER_PENDING_SIGNALS_H
#define UR_SCANNER_PENDING_SIGNALS_H

#include <stddef.h>
#include <stdint.h>

#include "thread_capture.h"

/* The sigval of every queued signal sent with one (si_code < 0: sigqueue,
 * timers, message queues, AIO), in *out (malloc'ed, free it); returns how
 * many, or -errno. Needs the threads stopped, from the tracing thread. */
long ur_pending_signal_values(const struct ur_capture *c, uint64_t **out);

#endif
