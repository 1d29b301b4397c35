/*
 * ur_team_ops (heap_walker.h) over pthreads, for marking teams in a normal
 * process: the scanner marking a frozen copy, and the walker's C tests. (The
 * snapshot child may not use libc threads: it has raw_thread.h.)
 */
#ifndef UR_SCANNER_PTHREAD_TEAM_H
#define UR_SCANNER_PTHREAD_TEAM_H

#include <pthread.h>

#define UR_PTHREAD_TEAM_MAX 16

struct ur_pthread_team { /* zeroed before use */
  pthread_t t[UR_PTHREAD_TEAM_MAX];
  unsigned n;
};

/* ctx: a struct ur_pthread_team. */
int ur_pthread_team_start(void *ctx, void (*fn)(void *), void *arg);
void ur_pthread_team_join(void *ctx);

#endif
