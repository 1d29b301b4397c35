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

struct ur_options {
  size_t backtrace_frames;        /* 0 unless a backtrace option was given */
  bool backtrace;                 /* backtrace / bt */
  bool backtrace_enable_on_signal;/* backtrace_enable_on_signal / bt_en_on_sig */
  size_t backtrace_min_size;      /* inclusive range of sizes that get a backtrace */
  size_t backtrace_max_size;
  bool verbose;
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
