/*
 * The snapshot helper thread (abi.h ur_helper_cmd): on UR_CMD_SNAPSHOT it
 * clones a copy-on-write image of the process for the scanner to read.
 */
#ifndef UR_HELPER_H
#define UR_HELPER_H

#include <stdint.h>

/* Requests a signal handler posts for the helper (ur_g.pending bits). */
#define UR_REQ_DUMP_HEAP 1u    /* SIGRTMAX-17: heap dump to <prefix>.<pid>.txt */
#define UR_REQ_RECORD_DUMP 2u  /* SIGRTMAX-18: record_allocs to its file */
#define UR_REQ_STATS 4u        /* SIGRTMAX-15: glibc's allocator statistics */
#define UR_REQ_UNREACHABLE 8u  /* SIGRTMAX-16: ask unreachabled to scan us */
#define UR_REQ_STEP_ASIDE 16u  /* ur_helper_step_aside: end the thread if idle */

/* Async-signal-safe: post requests and wake the helper. */
void ur_helper_request(uint32_t bits);

/* What the requests above ask for (malloc_debug's work: debug_setup.c),
 * run on the helper thread. Set before the helper starts. */
void ur_helper_on_requests(void (*work)(uint32_t requests));

/* Start the helper unless one runs or is starting; safe to call from the
 * constructor or an allocation path. */
void ur_helper_start(void);

/* Ends the helper thread, for a system call that the kernel grants only to
 * a process of one thread (namespaces.c). Returns 1 once no helper runs, 0
 * if it is busy with a scan (it then stays). Not async-signal-safe. */
int ur_helper_step_aside(void);

/* The blocks glibc allocated for the helper thread (registered, but the
 * shim's): ur_helper_note_own records one (the thread starting the helper
 * has ur_tls.own_alloc set); ur_helper_owns says whether a registry key
 * (mangled pointer) is one, for leak_track, heap dumps and malloc_iterate. */
void ur_helper_note_own(const void *p);
int ur_helper_owns(uint64_t key);

/* fork child: the helper did not survive. glibc_forked: the next allocation
 * starts one; 0 (a raw clone's child, raw_clone.c): none is ever started. */
void ur_helper_after_fork_child(int glibc_forked);

#endif
