/*
 * Keeping the helper thread out of glibc's sight. pthread_create tells glibc
 * the process has threads (__libc_single_threaded = 0) for good, and from
 * then on glibc's malloc takes its arena locks: a single-threaded program
 * whose signal handler calls malloc then deadlocks on the lock the code it
 * interrupted holds, where alone it would not. The helper never calls into
 * glibc's allocator or locks a mutex the program shares, so when the
 * program was single-threaded as the helper started, the flag is set back;
 * it is cleared for real the first time the helper must do such work, and
 * for the duration of a set*id() call, which must reach the helper too.
 */
#ifndef UR_SINGLE_THREAD_H
#define UR_SINGLE_THREAD_H

/* Read before pthread_create of the helper, passed after it succeeded. */
int ur_single_before_helper(void);
void ur_single_after_helper(int was_single);

/* The helper, before work that may enter glibc's allocator or take a
 * mutex the program uses: glibc sees the threads from now on, and no
 * program thread is still inside a call that read the old flag. */
void ur_single_end(void);

/* Whether glibc sees one thread (the flag glibc's own fork reads). */
int ur_single_glibc_sees_one(void);

#endif
