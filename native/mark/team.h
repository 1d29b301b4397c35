/*
 * A team of marking threads (ur_walker_mark_team, the reference graph's
 * build): how the caller starts them.
 */
#ifndef UR_MARK_TEAM_H
#define UR_MARK_TEAM_H

/* How the caller runs the extra marking threads (pthreads; raw clones in the
 * snapshot child, which may not use libc). */
struct ur_team_ops {
  int (*start)(void *ctx, void (*fn)(void *), void *arg); /* 0, or -errno: not started */
  void (*join)(void *ctx);                                /* wait for every started one */
  void *ctx;
};

#define UR_WALKER_MAX_TEAM 64u

#endif
