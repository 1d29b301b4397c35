/*
 * malloc_debug's settings and the state its features share (bionic's
 * Config and DebugData): decided once by ur_debug_configure
 * (debug_setup.c) from the parsed options, read by every debug_*.c file.
 */
#ifndef UR_DEBUG_CONFIG_H
#define UR_DEBUG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "options.h"

struct ur_rec;

struct ur_debug {
  struct ur_options o;
  const char *prog;
  bool header;
  bool backtrace;        /* backtrace or backtrace_enable_on_signal: heap dumps */
  size_t front, rear, offset, extra, expand;
  size_t fill_alloc, fill_free;
  /* free_track */
  size_t ft_cap, ft_frames, ft_stride, ft_head, ft_count;
  uint8_t *ft;
  uint32_t ft_lock; /* ur_tid_lock */
  /* record_allocs */
  struct ur_rec *rec;
  size_t rec_total;
  uint64_t rec_cur;
  uint32_t rec_inflight, rec_dumping, rec_lock;
  /* signals */
  int sig_bt, sig_dump, sig_record, sig_stats, sig_unreachable;
  char notify_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  uint32_t exited;
};

extern struct ur_debug ur_debug;

#endif
