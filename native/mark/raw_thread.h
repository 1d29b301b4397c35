/*
 * Threads without libc, for the snapshot child's marking team: raw clone()
 * onto an mmap'ed stack, joined by the kernel clearing the thread id
 * (CLONE_CHILD_CLEARTID). They share the creator's TLS pointer, so the code
 * they run must not touch TLS (no errno: native/mark/raw_syscall.h). x86_64
 * only; elsewhere start fails and the walker marks with fewer threads.
 */
#ifndef UR_MARK_RAW_THREAD_H
#define UR_MARK_RAW_THREAD_H

#include <stddef.h>
#include <stdint.h>

#include "team.h"

struct ur_raw_thread {
  int32_t tid;  /* nonzero while the thread lives; the kernel clears it and wakes */
  void *stack;
  size_t stack_size;
};

struct ur_raw_threads {
  struct ur_raw_thread t[UR_WALKER_MAX_TEAM];
  unsigned n;
};

/* ur_team_ops over raw threads; ctx: a zeroed struct ur_raw_threads. */
int ur_raw_thread_start(void *ctx, void (*fn)(void *), void *arg);
void ur_raw_thread_join(void *ctx);

#endif
