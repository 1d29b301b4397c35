/*
 * malloc_debug's output (debug_log.c): lines on stderr, backtraces in
 * bionic's format, and dump files opened safely and written through a
 * buffer that never allocates.
 */
#ifndef UR_DEBUG_LOG_H
#define UR_DEBUG_LOG_H

#include <stddef.h>
#include <stdint.h>

#define LOG_DIVIDER "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***"
#define FAILURE_FRAMES 16

/* One "malloc_debug: " line on stderr. */
__attribute__((format(printf, 1, 2))) void ur_dlog(const char *fmt, ...);

/* Where a pc lies, as dladdr tells: file "" (and rel = pc) when in no
 * object, sym NULL (and off 0) when no symbol covers it. */
struct ur_pc_name {
  const char *file;
  uintptr_t rel;
  const char *sym;
  uintptr_t off;
};

struct ur_pc_name ur_name_pc(uintptr_t pc);

/* bionic's frame lines for n pcs. */
void ur_log_frames(const uint64_t *f, size_t n);

/* Up to max pcs of the calling thread's stack (errno kept). */
size_t ur_debug_unwind(uint64_t *out, size_t max);

/* The calling thread's stack, then an interned allocation stack. */
void ur_log_backtrace_here(void);
void ur_log_stack_id(uint32_t id);

/* abort_on_error. */
void ur_maybe_abort(void);

struct ur_bw {
  int fd;
  size_t len;
  char buf[8192];
};

void ur_bw_flush(struct ur_bw *w);
__attribute__((format(printf, 2, 3))) void ur_bw_printf(struct ur_bw *w, const char *fmt, ...);

/* Open a dump file for writing: -1 with errno set, or with *why saying
 * what was refused (see debug_log.c). */
int ur_open_output(const char *path, const char **why);

#endif
