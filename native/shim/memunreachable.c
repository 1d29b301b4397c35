/*
 * libmemunreachable's C interface (unreachable/memunreachable.h), served by
 * the shim: the calling thread runs the ordinary scanner on its own process
 * (memunreachable_spawn.c) and reads its report, a stream of fixed records
 * (memunreachable_read.c). This file holds the entry points: one scan at a
 * time per process, the result's memory, the one-line log of a failure.
 */
#define UNREACHABLE_MEMUNREACHABLE_STRONG
#include "unreachable/memunreachable.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memunreachable_read.h"
#include "memunreachable_spawn.h"
#include "state.h"

#define LOG_PREFIX "libmemunreachable: "

static pthread_mutex_t scan_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- small helpers that never allocate ---------------------------------- */

static void log_piece(const char *s, size_t n) {
  struct iovec iov[3] = {
      {(void *)LOG_PREFIX, sizeof LOG_PREFIX - 1}, {(void *)s, n}, {(void *)"\n", 1}};
  size_t total = iov[0].iov_len + n + 1;
  ssize_t w;
  do w = writev(STDERR_FILENO, iov, 3);
  while (w < 0 && errno == EINTR);
  if (w >= 0 && (size_t)w < total) { /* short write: finish byte by byte per piece */
    size_t done = (size_t)w;
    for (int i = 0; i < 3; i++) {
      if (done >= iov[i].iov_len) {
        done -= iov[i].iov_len;
        continue;
      }
      ur_write_stderr((const char *)iov[i].iov_base + done, iov[i].iov_len - done);
      done = 0;
    }
  }
}

static void fail(struct unreachable_lmu_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail(struct unreachable_lmu_result *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
}

/* A scanner that ended as a scan does but left no whole report: say what
 * it said. */
static void no_report(const struct lmu_output *o, struct unreachable_lmu_result *r) {
  const char *sep = o->why[0] ? ": " : "";
  if (o->reaped == 0)
    fail(r, "the scanner exited with status %d without a report%s%s%s", WEXITSTATUS(o->status),
         sep, o->why, o->hint);
  else
    fail(r, "the scanner's report is incomplete%s%s", sep, o->why);
}

static int run_scan(unsigned flags, size_t limit, struct unreachable_lmu_result *r) {
  struct lmu_output o;
  if (lmu_run_scanner(flags, limit, &o, r->error, sizeof r->error) != 0) return -1;
  if (lmu_read_report(&o, r) == 0) return 0;
  no_report(&o, r);
  lmu_output_free(&o);
  return -1;
}

/* ---- exported entry points ------------------------------------------------- */

UR_EXPORT bool unreachable_lmu_scan(unsigned flags, size_t limit,
                                    struct unreachable_lmu_result *result) {
  memset(result, 0, sizeof *result);
  int saved = errno;
  pthread_mutex_lock(&scan_lock);
  int rc = run_scan(flags, limit, result);
  pthread_mutex_unlock(&scan_lock);
  if (rc != 0) {
    log_piece(result->error, strlen(result->error));
  }
  errno = saved;
  return rc == 0;
}

UR_EXPORT void unreachable_lmu_release(struct unreachable_lmu_result *result) {
  if (!result) return;
  if (result->priv_[0]) munmap(result->priv_[0], (size_t)(uintptr_t)result->priv_[1]);
  memset(result, 0, sizeof *result);
}

UR_EXPORT bool LogUnreachableMemory(bool log_contents, size_t limit) {
  struct unreachable_lmu_result r;
  if (!unreachable_lmu_scan(log_contents ? UNREACHABLE_LMU_CONTENTS : 0u, limit, &r))
    return false;
  const char *p = r.text, *end = r.text + r.text_length;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    log_piece(p, n);
    p += n + (nl ? 1 : 0);
  }
  unreachable_lmu_release(&r);
  return true;
}

UR_EXPORT bool NoLeaks(void) {
  struct unreachable_lmu_result r;
  /* limit 0: only the totals are needed, so nothing is symbolized. */
  if (!unreachable_lmu_scan(0u, 0, &r)) return false;
  bool none = r.num_leaks == 0;
  unreachable_lmu_release(&r);
  return none;
}
