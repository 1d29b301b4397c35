/*
 * UNREACHABLE_MALLOC_OPTIONS, parsed exactly as bionic's malloc_debug parses
 * its options (Config.cpp): whitespace-separated name[=value], spaces allowed
 * around '=', base-10 values, the same names, aliases, limits and errors.
 *
 * Self-contained (no shim state) so it can be unit-tested under sanitizers.
 */
#ifndef UR_OPTIONS_H
#define UR_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UR_OPTIONS_ENV "UNREACHABLE_MALLOC_OPTIONS"
#define UR_DEFAULT_BACKTRACE_FRAMES 16
#define UR_MAX_OPTIONS 64
#define UR_OPTION_PATH_MAX 1024 /* the longest value the parser accepts */
#define UR_DEFAULT_LEAK_CHECK_EXITCODE 23 /* LeakSanitizer's */

/* Linux defaults for bionic's /data/local/tmp paths (docs/malloc_debug.md). */
#define UR_DEFAULT_DUMP_PREFIX "/tmp/backtrace_heap"
#define UR_DEFAULT_RECORD_FILE "/tmp/record_allocs.txt"

struct ur_options {
  size_t backtrace_frames;        /* 0 unless a backtrace option was given */
  bool backtrace;                 /* backtrace / bt */
  bool backtrace_enable_on_signal;/* backtrace_enable_on_signal / bt_en_on_sig */
  size_t backtrace_min_size;      /* inclusive range of sizes that get a backtrace */
  size_t backtrace_max_size;
  bool verbose;
  /* malloc_debug's other options; 0 / false when not given. */
  size_t front_guard_bytes;       /* rounded up to 16 (the returned alignment) */
  size_t rear_guard_bytes;
  size_t fill_on_alloc_bytes;     /* SIZE_MAX: the whole allocation */
  size_t fill_on_free_bytes;
  size_t expand_alloc_bytes;
  size_t free_track_allocations;
  size_t free_track_backtrace_num_frames;
  size_t record_allocs;           /* TOTAL_ENTRIES */
  bool backtrace_dump_on_exit;
  bool backtrace_full;
  bool leak_track;
  bool record_allocs_on_exit;
  bool verify_pointers;
  bool abort_on_error;
  bool check_unreachable_on_signal;
  bool log_allocator_stats_on_signal;
  bool log_allocator_stats_on_exit;
  /* Scan the process as it exits (exit_check.c); leaks left exit with this
   * code (LeakSanitizer's 23 by default; 0 reports but keeps the status). */
  bool leak_check_at_exit;
  size_t leak_check_exitcode;
  char backtrace_dump_prefix[UR_OPTION_PATH_MAX];
  char record_allocs_file[UR_OPTION_PATH_MAX];
  /* Options given that parse but have no implementation yet, by table index,
   * in order of first appearance. */
  unsigned unimplemented[UR_MAX_OPTIONS];
  unsigned num_unimplemented;
};

/* Receives each message (without trailing newline). */
typedef void (*ur_options_log_fn)(void *ctx, const char *msg);

/* Parse str into *out. On error logs one message (bionic's text, progname
 * first) and returns false. log may be NULL to parse silently. */
bool ur_options_parse(const char *str, struct ur_options *out, const char *progname,
                      ur_options_log_fn log, void *ctx);

/* Canonical name of table entry i (for the "not implemented" notice). */
const char *ur_options_name(unsigned i);

#endif
