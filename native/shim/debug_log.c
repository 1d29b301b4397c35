/*
 * Where malloc_debug writes: its "malloc_debug: " lines on stderr (with
 * bionic's frame lines), and the files of heap dumps and record_allocs,
 * written without malloc.
 */
#include "debug_log.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "debug_config.h"
#include "modules.h"
#include "stacks.h"
#include "state.h"
#include "unwind.h"

__attribute__((format(printf, 1, 2))) void ur_dlog(const char *fmt, ...) {
  char buf[1024];
  static const char tag[] = "malloc_debug: ";
  memcpy(buf, tag, sizeof tag - 1);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + sizeof tag - 1, sizeof buf - sizeof tag, fmt, ap);
  va_end(ap);
  size_t len = sizeof tag - 1 + (n < 0 ? 0 : (size_t)n);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  ur_write_stderr(buf, len);
}

struct ur_pc_name ur_name_pc(uintptr_t pc) {
  Dl_info info;
  struct ur_pc_name n = {"", pc, NULL, 0};
  if (dladdr((void *)pc, &info) && info.dli_fname) {
    n.file = ur_object_path(info.dli_fname);
    n.rel = pc - (uintptr_t)info.dli_fbase;
    if (info.dli_sname && info.dli_saddr) {
      n.sym = info.dli_sname;
      n.off = pc - (uintptr_t)info.dli_saddr;
    }
  }
  return n;
}

/* bionic's frame lines: "          #00  pc 0000000000012345  /lib/x.so (fn+12)". */
void ur_log_frames(const uint64_t *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    struct ur_pc_name pn = ur_name_pc((uintptr_t)f[i]);
    if (!*pn.file)
      ur_dlog("          #%02zu  pc %016" PRIxPTR "  <unknown>", i, pn.rel);
    else if (pn.sym)
      ur_dlog("          #%02zu  pc %016" PRIxPTR "  %s (%s+%" PRIuPTR ")", i, pn.rel, pn.file,
              pn.sym, pn.off);
    else
      ur_dlog("          #%02zu  pc %016" PRIxPTR "  %s", i, pn.rel, pn.file);
  }
}

size_t ur_debug_unwind(uint64_t *out, size_t max) {
  uintptr_t f[UR_MAX_FRAMES];
  if (max > UR_MAX_FRAMES) max = UR_MAX_FRAMES;
  int saved = errno; /* libunwind's probes of memory set it */
  ur_tls.busy++;
  size_t n = ur_unwind(f, max);
  ur_tls.busy--;
  errno = saved;
  for (size_t i = 0; i < n; i++) out[i] = f[i];
  return n;
}

void ur_log_backtrace_here(void) {
  uint64_t f[FAILURE_FRAMES];
  size_t n = ur_debug_unwind(f, FAILURE_FRAMES);
  ur_log_frames(f, n);
}

void ur_log_stack_id(uint32_t id) {
  size_t n;
  const uint64_t *f = ur_stacks_frames(id, &n);
  if (f) ur_log_frames(f, n);
}

void ur_maybe_abort(void) {
  if (ur_debug.o.abort_on_error) abort();
}


/* ---- buffered file output (no malloc) ----------------------------------- */

void ur_bw_flush(struct ur_bw *w) {
  size_t off = 0;
  while (off < w->len) {
    ssize_t n = write(w->fd, w->buf + off, w->len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += (size_t)n;
  }
  w->len = 0;
}

__attribute__((format(printf, 2, 3))) void ur_bw_printf(struct ur_bw *w, const char *fmt, ...) {
  for (int attempt = 0; attempt < 2; attempt++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->buf + w->len, sizeof w->buf - w->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof w->buf - w->len) {
      w->len += (size_t)n;
      return;
    }
    ur_bw_flush(w); /* did not fit: flush and retry once (lines are short) */
  }
}

/* Dump files often live in a world-writable directory (/tmp): another user
 * may have put a file, a FIFO or a link there first, for a root process to
 * write into. A new file is created exclusively, mode 0600 (heap addresses and
 * backtraces are the process's business); an existing one is rewritten only
 * when it is a regular file with one link, owned by this process's user.
 * Returns -1 with errno set, or with *why saying what was refused. */
int ur_open_output(const char *path, const char **why) {
  *why = NULL;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0 || errno != EEXIST) return fd;
  /* O_NONBLOCK: opening a FIFO must not wait for a reader. */
  fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (!S_ISREG(st.st_mode))
    *why = "it exists and is not a regular file";
  else if (st.st_uid != geteuid())
    *why = "it exists and belongs to another user";
  else if (st.st_nlink != 1)
    *why = "it exists and has other hard links";
  if (*why || ftruncate(fd, 0) != 0 || fcntl(fd, F_SETFL, 0) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}
