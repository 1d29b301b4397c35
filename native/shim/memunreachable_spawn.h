/*
 * The first half of the shim's libmemunreachable interface behind its entry
 * points (memunreachable.c): start the scanner on this process and collect
 * what it writes, or say why it failed (memunreachable_read.h reads it).
 * Nothing here goes through malloc: buffers are mmap'ed.
 */
#ifndef UR_MEMUNREACHABLE_SPAWN_H
#define UR_MEMUNREACHABLE_SPAWN_H

#include <stddef.h>

#include "unreachable/memunreachable.h"

#define LMU_TAIL_BYTES 2048

/* What a scanner that ran to the end left behind. */
struct lmu_output {
  char *data;          /* its stdout, mmap'ed: cap bytes, len of them written */
  size_t len, cap;
  int reaped;          /* 0: status is its wait status; -1: someone else reaped it */
  int status;
  char why[LMU_TAIL_BYTES]; /* the last line of its stderr ("" if none) */
  const char *hint;         /* "" or why this process may not be traced */
};

/* Run `scan --format lmu-records --limit LIMIT [--contents] <this pid>` in a
 * child and wait for it (bounded by $UNREACHABLE_LMU_TIMEOUT). 0: it ended
 * as a scan does (exit 0 or 1, or reaped by someone else), *out holds its
 * output (lmu_output_free). -1: it failed; error says why, nothing to free. */
int lmu_run_scanner(unsigned flags, size_t limit, struct lmu_output *out, char *error,
                    size_t error_size);
void lmu_output_free(struct lmu_output *out);

#endif
