/*
 * malloc_debug's options (see debug.h), following bionic's malloc_debug.cpp,
 * GuardData.cpp, PointerData.cpp and RecordData.cpp: same header tags, guard
 * and fill values, message texts and order of checks. Differences are
 * documented in docs/malloc_debug.md.
 */
#include "debug.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "entry.h"
#include "helper.h"
#include "lock.h"
#include "modules.h"
#include "region.h"
#include "registry.h"
#include "shim.h"
#include "stacks.h"
#include "syms.h"
#include "unreachable/malloc_debug.h"
#include "unwind.h"

#define LOG_DIVIDER "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***"
#define DEBUG_TAG 0x1ee7d00du
#define DEBUG_FREE_TAG 0x1cc7dccdu
#define FRONT_GUARD_VALUE 0xaa
#define REAR_GUARD_VALUE 0xbb
#define FILL_ALLOC_VALUE 0xeb
#define FILL_FREE_VALUE 0xef
#define FAILURE_FRAMES 16
#define DEFAULT_NOTIFY_SOCKET "/run/unreachable/notify.sock"

/* Only with front_guard/rear_guard (bionic's HEADER_OPTIONS). Lies just
 * before the front guard, which lies just before the user pointer, so it is
 * outside the block the registry names; the glibc pointer is kept mangled. */
struct hdr {
  uint32_t tag;        /* DEBUG_TAG, DEBUG_FREE_TAG once freed */
  uint32_t reserved;
  uint64_t orig;       /* UR_MANGLE(pointer glibc returned) */
  uint64_t size;       /* requested size */
  uint64_t usable;     /* usable bytes from the user pointer (== size with a rear guard) */
};
_Static_assert(sizeof(struct hdr) == 32, "header keeps the user pointer 16-aligned");

/* free_track FIFO entry (in the region): mangled pointer, free backtrace. */
struct ft_entry {
  uint64_t ptr;
  uint64_t nframes;
  uint64_t frames[];
};

/* record_allocs entry (in the region); pointers mangled. */
enum { REC_MALLOC = 1, REC_FREE, REC_CALLOC, REC_REALLOC, REC_MEMALIGN, REC_THREAD_DONE };
struct rec {
  uint64_t ptr;   /* UR_MANGLE(result or freed pointer) */
  uint64_t arg;   /* calloc: nmemb; memalign: alignment; realloc: UR_MANGLE(old) */
  uint64_t size;
  uint32_t tid;
  uint32_t type;
};

static struct {
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
  struct rec *rec;
  size_t rec_total;
  uint64_t rec_cur;
  uint32_t rec_inflight, rec_dumping, rec_lock, rec_owner;
  /* signals */
  int sig_bt, sig_dump, sig_record, sig_stats, sig_unreachable;
  char notify_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  uint32_t exited;
} D;

/* ---- logging -------------------------------------------------------------- */

__attribute__((format(printf, 1, 2))) static void dlog(const char *fmt, ...) {
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

/* Where a pc lies, as dladdr tells: file "" (and rel = pc) when in no
 * object, sym NULL (and off 0) when no symbol covers it. */
struct pc_name {
  const char *file;
  uintptr_t rel;
  const char *sym;
  uintptr_t off;
};

static struct pc_name name_pc(uintptr_t pc) {
  Dl_info info;
  struct pc_name n = {"", pc, NULL, 0};
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
static void log_frames(const uint64_t *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    struct pc_name pn = name_pc((uintptr_t)f[i]);
    if (!*pn.file)
      dlog("          #%02zu  pc %016" PRIxPTR "  <unknown>", i, pn.rel);
    else if (pn.sym)
      dlog("          #%02zu  pc %016" PRIxPTR "  %s (%s+%" PRIuPTR ")", i, pn.rel, pn.file,
           pn.sym, pn.off);
    else
      dlog("          #%02zu  pc %016" PRIxPTR "  %s", i, pn.rel, pn.file);
  }
}

static size_t unwind_here(uint64_t *out, size_t max) {
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

static void log_backtrace_here(void) {
  uint64_t f[FAILURE_FRAMES];
  size_t n = unwind_here(f, FAILURE_FRAMES);
  log_frames(f, n);
}

static void log_stack_id(uint32_t id) {
  size_t n;
  const uint64_t *f = ur_stacks_frames(id, &n);
  if (f) log_frames(f, n);
}

static void maybe_abort(void) {
  if (D.o.abort_on_error) abort();
}

/* ---- blocks: header, guards, fill ---------------------------------------- */

static inline struct hdr *hdr_of(const void *p) { return (struct hdr *)((uintptr_t)p - D.offset); }

static inline size_t usable_of(void *p) {
  return D.header ? hdr_of(p)->usable : ur_real_usable_size(p);
}

static inline void *orig_of(void *p) {
  return D.header ? (void *)UR_UNMANGLE(hdr_of(p)->orig) : p;
}

/* A block for n user bytes, neither registered nor filled yet. align: 0 for
 * malloc's alignment, else a memalign alignment. */
static void *alloc_block(size_t n, size_t align, bool zero) {
  size_t real;
  if (D.header) {
    size_t a = 16;
    if (align > SIZE_MAX / 2 + 1) { /* as glibc's memalign */
      errno = EINVAL;
      return NULL;
    }
    if (align > 16) {
      a = align;
      if (a & (a - 1)) a = (size_t)1 << (64 - __builtin_clzll(a)); /* next power of two */
    }
    if (__builtin_add_overflow(n, D.extra, &real) ||
        __builtin_add_overflow(real, a > 16 ? a : 0, &real)) {
      errno = ENOMEM;
      return NULL;
    }
    void *orig = __libc_malloc(real); /* 16-aligned, like bionic's memalign(16) */
    if (!orig) return NULL;
    uintptr_t u = ((uintptr_t)orig + D.offset + a - 1) & ~(uintptr_t)(a - 1);
    struct hdr *h = hdr_of((void *)u);
    size_t usable = ur_real_usable_size(orig);
    if (usable < real) usable = real;
    h->tag = DEBUG_TAG;
    h->reserved = 0;
    h->orig = UR_MANGLE(orig);
    h->size = n;
    h->usable = usable - (u - (uintptr_t)orig);
    if (zero) memset((void *)u, 0, h->usable);
    if (D.front) memset((uint8_t *)h + sizeof *h, FRONT_GUARD_VALUE, D.front);
    if (D.rear) {
      memset((uint8_t *)u + n, REAR_GUARD_VALUE, D.rear);
      h->usable = n;
    }
    return (void *)u;
  }
  if (__builtin_add_overflow(n, D.expand, &real)) {
    errno = ENOMEM;
    return NULL;
  }
  if (align) return __libc_memalign(align, real);
  return zero ? __libc_calloc(1, real) : __libc_malloc(real);
}

static void fill_alloc(void *p) {
  if (!D.fill_alloc || !p) return;
  size_t n = usable_of(p);
  memset(p, FILL_ALLOC_VALUE, n < D.fill_alloc ? n : D.fill_alloc);
}

static void guard_failure(void *p, struct hdr *h, const uint8_t *data, size_t len,
                          uint8_t expected, const char *which, uint32_t stack_id) {
  dlog(LOG_DIVIDER);
  dlog("+++ ALLOCATION %p SIZE %zu HAS A CORRUPTED %s GUARD", p, (size_t)h->size, which);
  long idx = (long)((intptr_t)data - (intptr_t)p);
  for (size_t i = 0; i < len; i++)
    if (data[i] != expected)
      dlog("  allocation[%ld] = 0x%02x (expected 0x%02x)", idx + (long)i, data[i], expected);
  dlog("Backtrace at time of failure:");
  log_backtrace_here();
  if (stack_id) {
    dlog("Backtrace at time of allocation:");
    log_stack_id(stack_id);
  }
  dlog(LOG_DIVIDER);
  maybe_abort();
}

static bool all_bytes(const uint8_t *p, size_t n, uint8_t v) {
  uint64_t w = UINT64_C(0x0101010101010101) * v;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    memcpy(&x, p + i, 8);
    if (x != w) return false;
  }
  for (; i < n; i++)
    if (p[i] != v) return false;
  return true;
}

static void check_guards(void *p, struct hdr *h, uint32_t stack_id) {
  if (D.front) {
    const uint8_t *g = (const uint8_t *)h + sizeof *h;
    if (!all_bytes(g, D.front, FRONT_GUARD_VALUE))
      guard_failure(p, h, g, D.front, FRONT_GUARD_VALUE, "FRONT", stack_id);
  }
  if (D.rear) {
    const uint8_t *g = (const uint8_t *)p + h->size;
    if (!all_bytes(g, D.rear, REAR_GUARD_VALUE))
      guard_failure(p, h, g, D.rear, REAR_GUARD_VALUE, "REAR", stack_id);
  }
}

/* ---- free_track ---------------------------------------------------------- */

static inline struct ft_entry *ft_at(size_t i) {
  return (struct ft_entry *)(D.ft + (i % D.ft_cap) * D.ft_stride);
}

/* Find p among the blocks held back; copies its free backtrace. */
static bool ft_find(const void *p, uint64_t *frames, size_t *nframes) {
  uint64_t key = UR_MANGLE(p);
  bool found = false;
  if (!ur_tid_lock(&D.ft_lock, ur_self_tid())) return false; /* a handler inside the FIFO's owner */
  for (size_t i = 0; i < D.ft_count && !found; i++) {
    struct ft_entry *e = ft_at(D.ft_head + i);
    if (e->ptr == key) {
      found = true;
      *nframes = e->nframes;
      memcpy(frames, e->frames, e->nframes * sizeof *frames);
    }
  }
  ur_tid_unlock(&D.ft_lock);
  return found;
}

static void log_free_error(uintptr_t p, size_t len, const uint64_t *frames, size_t nframes) {
  const uint8_t *mem = (const uint8_t *)p;
  dlog(LOG_DIVIDER);
  dlog("+++ ALLOCATION %p USED AFTER FREE", (void *)p);
  for (size_t i = 0; i < len; i++)
    if (mem[i] != FILL_FREE_VALUE)
      dlog("  allocation[%zu] = 0x%02x (expected 0x%02x)", i, mem[i], FILL_FREE_VALUE);
  if (nframes) {
    dlog("Backtrace at time of free:");
    log_frames(frames, nframes);
  }
  dlog(LOG_DIVIDER);
  maybe_abort();
}

/* PointerData::VerifyFreedPointer. Returns false if the block must not be
 * given back to glibc (its header is damaged, so its glibc pointer is too). */
static bool ft_verify(uintptr_t p, const uint64_t *frames, size_t nframes) {
  size_t usable;
  if (D.header) {
    struct hdr *h = hdr_of((void *)p);
    if (h->tag != DEBUG_FREE_TAG) {
      dlog(LOG_DIVIDER);
      dlog("+++ ALLOCATION 0x%" PRIxPTR " HAS CORRUPTED HEADER TAG 0x%x AFTER FREE", p, h->tag);
      dlog(LOG_DIVIDER);
      maybe_abort();
      return false;
    }
    usable = h->usable;
  } else {
    usable = ur_real_usable_size((void *)p);
  }
  size_t bytes = usable < D.fill_free ? usable : D.fill_free;
  if (!all_bytes((const uint8_t *)p, bytes, FILL_FREE_VALUE))
    log_free_error(p, bytes, frames, nframes);
  return true;
}

/* Hold p back: 0. If the FIFO was full, 1 and the oldest block in evicted
 * (verified by the caller, then really freed). -1: not held, because this
 * is a signal handler's free that interrupted its own thread inside the
 * FIFO; the caller frees p at once. */
static int ft_push(void *p, const uint64_t *frames, size_t nframes, struct ft_entry *evicted) {
  int out = 0;
  if (!ur_tid_lock(&D.ft_lock, ur_self_tid())) return -1;
  if (D.ft_count == D.ft_cap) {
    struct ft_entry *old = ft_at(D.ft_head);
    memcpy(evicted, old, D.ft_stride);
    D.ft_head = (D.ft_head + 1) % D.ft_cap;
    D.ft_count--;
    out = 1;
  }
  struct ft_entry *e = ft_at(D.ft_head + D.ft_count);
  e->ptr = UR_MANGLE(p);
  e->nframes = nframes;
  memcpy(e->frames, frames, nframes * sizeof *frames);
  D.ft_count++;
  ur_tid_unlock(&D.ft_lock);
  return out;
}

/* ---- bad pointers -------------------------------------------------------- */

/* malloc_debug.cpp LogError. */
static void log_pointer_error(const void *p, const char *what) {
  dlog(LOG_DIVIDER);
  dlog("+++ ALLOCATION %p %s", p, what);
  if (D.ft_cap) {
    uint64_t frames[UR_MAX_FRAMES];
    size_t n = 0;
    if (ft_find(p, frames, &n) && n) {
      dlog("Backtrace of original free:");
      log_frames(frames, n);
    }
  }
  dlog("Backtrace at time of failure:");
  log_backtrace_here();
  dlog(LOG_DIVIDER);
  maybe_abort();
}

/* p is not in the registry. Returns true if it was reported (the call then
 * does nothing); false for a block that never went through the debug path
 * (allocated while the shim itself was working), which glibc handles. */
static bool bad_pointer(const void *p, const char *fn) {
  char what[64];
  uint64_t frames[1];
  size_t n;
  if (D.ft_cap && ft_find(p, frames, &n)) {
    snprintf(what, sizeof what, "USED AFTER FREE (%s)", fn);
    log_pointer_error(p, what);
    return true;
  }
  if (D.o.verify_pointers) {
    snprintf(what, sizeof what, "UNKNOWN POINTER (%s)", fn);
    log_pointer_error(p, what);
    return true;
  }
  return false;
}

/* A registered block whose header tag is wrong (underflow, or garbage). */
static bool bad_tag(void *p, const char *fn) {
  if (!D.header) return false;
  uint32_t tag = hdr_of(p)->tag;
  if (tag == DEBUG_TAG) return false;
  char what[80];
  if (tag == DEBUG_FREE_TAG)
    snprintf(what, sizeof what, "USED AFTER FREE (%s)", fn);
  else
    snprintf(what, sizeof what, "HAS INVALID TAG %" PRIx32 " (%s)", tag, fn);
  log_pointer_error(p, what);
  return true;
}

/* ---- record_allocs -------------------------------------------------------- */

/* Reserve an entry: a free reserves before glibc can hand the block out
 * again, an allocation after glibc returned it, so the file's order is never
 * "malloc P" before the "free P" that made P available. */
static inline int64_t rec_reserve(void) {
  if (!D.rec) return -1;
  __atomic_fetch_add(&D.rec_inflight, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&D.rec_dumping, __ATOMIC_SEQ_CST)) {
    __atomic_fetch_sub(&D.rec_inflight, 1, __ATOMIC_RELEASE);
    return -1; /* operations during a dump are not recorded */
  }
  uint64_t i = __atomic_fetch_add(&D.rec_cur, 1, __ATOMIC_RELAXED);
  if (i >= D.rec_total) {
    __atomic_fetch_sub(&D.rec_inflight, 1, __ATOMIC_RELEASE);
    return -1; /* full: dropped until the next dump */
  }
  return (int64_t)i;
}

static inline void rec_commit(int64_t i, uint32_t type, uint64_t ptr, uint64_t arg,
                              uint64_t size) {
  if (i < 0) return;
  struct rec *r = &D.rec[i];
  r->ptr = ptr;
  r->arg = arg;
  r->size = size;
  r->tid = ur_self_tid();
  r->type = type;
  __atomic_fetch_sub(&D.rec_inflight, 1, __ATOMIC_RELEASE);
}

/* Calls made during the shim's own work (busy: glibc allocating for
 * pthread_create, say) are not the program's and are not recorded. */
static inline void rec_add(uint32_t type, uint64_t ptr, uint64_t arg, uint64_t size) {
  if (D.rec && !ur_tls.busy) rec_commit(rec_reserve(), type, ptr, arg, size);
}

void ur_debug_thread_done(void) { rec_add(REC_THREAD_DONE, UR_MANGLE(0), 0, 0); }

/* ---- buffered file output (no malloc) ----------------------------------- */

struct bw {
  int fd;
  size_t len;
  char buf[8192];
};

static void bw_flush(struct bw *w) {
  size_t off = 0;
  while (off < w->len) {
    ssize_t n = write(w->fd, w->buf + off, w->len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += (size_t)n;
  }
  w->len = 0;
}

__attribute__((format(printf, 2, 3))) static void bw_printf(struct bw *w, const char *fmt, ...) {
  for (int attempt = 0; attempt < 2; attempt++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->buf + w->len, sizeof w->buf - w->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof w->buf - w->len) {
      w->len += (size_t)n;
      return;
    }
    bw_flush(w); /* did not fit: flush and retry once (lines are short) */
  }
}

/* Dump files often live in a world-writable directory (/tmp): another user
 * may have put a file, a FIFO or a link there first, for a root process to
 * write into. A new file is created exclusively, mode 0600 (heap addresses and
 * backtraces are the process's business); an existing one is rewritten only
 * when it is a regular file with one link, owned by this process's user.
 * Returns -1 with errno set, or with *why saying what was refused. */
static int open_output(const char *path, const char **why) {
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

static void rec_dump(const char *path) {
  uint32_t tid = ur_self_tid();
  ur_lock_hard(&D.rec_lock, &D.rec_owner, tid);
  __atomic_store_n(&D.rec_dumping, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&D.rec_inflight, __ATOMIC_SEQ_CST)) sched_yield();
  uint64_t n = __atomic_load_n(&D.rec_cur, __ATOMIC_ACQUIRE);
  if (n > D.rec_total) n = D.rec_total;
  const char *why;
  int fd = open_output(path, &why);
  if (fd < 0) {
    dlog("Cannot create record alloc file %s: %s", path, why ? why : strerrordesc_np(errno));
  } else {
    static struct bw w; /* serialised by rec_lock; 8 KiB is too much for some stacks */
    w.fd = fd;
    w.len = 0;
    for (uint64_t i = 0; i < n; i++) {
      const struct rec *r = &D.rec[i];
      uintptr_t p = UR_UNMANGLE(r->ptr);
      switch (r->type) {
        case REC_MALLOC:
          bw_printf(&w, "%u: malloc 0x%" PRIxPTR " %" PRIu64 "\n", r->tid, p, r->size);
          break;
        case REC_FREE:
          bw_printf(&w, "%u: free 0x%" PRIxPTR "\n", r->tid, p);
          break;
        case REC_CALLOC:
          bw_printf(&w, "%u: calloc 0x%" PRIxPTR " %" PRIu64 " %" PRIu64 "\n", r->tid, p, r->arg,
                    r->size);
          break;
        case REC_REALLOC:
          bw_printf(&w, "%u: realloc 0x%" PRIxPTR " 0x%" PRIxPTR " %" PRIu64 "\n", r->tid, p,
                    UR_UNMANGLE(r->arg), r->size);
          break;
        case REC_MEMALIGN:
          bw_printf(&w, "%u: memalign 0x%" PRIxPTR " %" PRIu64 " %" PRIu64 "\n", r->tid, p, r->arg,
                    r->size);
          break;
        case REC_THREAD_DONE:
          bw_printf(&w, "%u: thread_done 0x0\n", r->tid);
          break;
        default:
          break;
      }
    }
    bw_flush(&w);
    close(fd);
    __atomic_store_n(&D.rec_cur, 0, __ATOMIC_RELEASE); /* dumped entries are deleted */
  }
  __atomic_store_n(&D.rec_dumping, 0, __ATOMIC_SEQ_CST);
  ur_unlock(&D.rec_lock, &D.rec_owner, 1);
}

/* ---- the debug entry points ----------------------------------------------- */

int ur_dbg_ready_slow(void) {
  if (ur_tls.busy) return 0;
  ur_init();
  return ur_load32(&ur_g.debug) == UR_DBG_ON;
}

static void *finish_alloc(struct ur_thread_slot *s, void *p, size_t n) {
  if (p) {
    ur_announce_out(s, p, n);
    ur_registry_insert(p, n, ur_maybe_capture(n));
    ur_note_own(p);
  }
  ur_leave(s);
  return p;
}

static void *dbg_malloc(size_t n) {
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return __libc_malloc(n);
  void *p = alloc_block(n, 0, false);
  fill_alloc(p);
  return finish_alloc(s, p, n);
}

void *ur_dbg_malloc(size_t n) {
  void *p = dbg_malloc(n);
  rec_add(REC_MALLOC, UR_MANGLE(p), 0, n);
  return p;
}

void *ur_dbg_calloc(size_t n, size_t m) {
  size_t total = n * m; /* the caller checked for overflow */
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return __libc_calloc(n, m);
  void *p = finish_alloc(s, alloc_block(total, 0, true), total);
  rec_add(REC_CALLOC, UR_MANGLE(p), n, m);
  return p;
}

void *ur_dbg_memalign(size_t align, size_t n) {
  struct ur_thread_slot *s = ur_begin(UR_OP_MALLOC, NULL, 0);
  if (UR_UNLIKELY(!s)) return __libc_memalign(align, n);
  void *p = alloc_block(n, align, false);
  fill_alloc(p);
  finish_alloc(s, p, n);
  rec_add(REC_MEMALIGN, UR_MANGLE(p), align, n);
  return p;
}

/* p (registered, already out of the registry) goes back: guards checked,
 * tagged free, filled, then held by free_track or given to glibc. */
static void release_block(void *p, uint32_t stack_id, bool guards) {
  size_t bytes;
  if (D.header) {
    struct hdr *h = hdr_of(p);
    if (guards) check_guards(p, h, stack_id);
    h->tag = DEBUG_FREE_TAG;
    bytes = h->usable;
  } else {
    bytes = ur_real_usable_size(p);
  }
  if (D.fill_free) {
    size_t f = bytes < D.fill_free ? bytes : D.fill_free;
    memset(p, FILL_FREE_VALUE, f);
    /* A held block is not registered, and a thread arena or mmap'ed chunk
     * with nothing registered is a root to the scanner: leave no stale
     * pointer in the part fill_on_free=N did not cover. */
    if (D.ft_cap && f < bytes) memset((uint8_t *)p + f, 0, bytes - f);
  }
  if (D.ft_cap) {
    uint64_t frames[UR_MAX_FRAMES];
    size_t n = D.ft_frames ? unwind_here(frames, D.ft_frames) : 0;
    union {
      struct ft_entry e;
      uint8_t raw[sizeof(struct ft_entry) + UR_MAX_FRAMES * sizeof(uint64_t)];
    } ev;
    int held = ft_push(p, frames, n, &ev.e);
    if (held == 0) return;
    if (held > 0) {
      p = (void *)UR_UNMANGLE(ev.e.ptr);
      if (!ft_verify((uintptr_t)p, ev.e.frames, ev.e.nframes)) return; /* leaked on purpose */
    }
  }
  __libc_free(orig_of(p));
}

static void dbg_free(void *p) {
  struct ur_thread_slot *s = ur_begin(UR_OP_FREE, p, 0);
  if (UR_UNLIKELY(!s)) {
    __libc_free(p);
    return;
  }
  /* free keeps errno, as glibc's does since 2.33; free_track's first unwind
   * in a thread leaves EAGAIN behind (libunwind probing memory). */
  int saved = errno;
  uint64_t size;
  uint32_t id;
  if (!ur_registry_take(p, &size, &id)) {
    if (!bad_pointer(p, "free")) __libc_free(p);
  } else if (bad_tag(p, "free")) {
    ur_registry_insert(p, size, id); /* left alone, as bionic does */
  } else {
    release_block(p, id, true);
  }
  ur_leave(s);
  errno = saved;
}

void ur_dbg_free(void *p) {
  rec_add(REC_FREE, UR_MANGLE(p), 0, 0);
  dbg_free(p);
}

void *ur_dbg_realloc(void *p, size_t n) {
  if (!p) {
    void *q = dbg_malloc(n);
    rec_add(REC_REALLOC, UR_MANGLE(q), UR_MANGLE(NULL), n);
    return q;
  }
  if (n == 0) { /* glibc frees and returns NULL */
    rec_add(REC_REALLOC, UR_MANGLE(NULL), UR_MANGLE(p), 0);
    dbg_free(p);
    return NULL;
  }
  struct ur_thread_slot *s = ur_begin(UR_OP_REALLOC, p, n);
  if (UR_UNLIKELY(!s)) return __libc_realloc(p, n);
  int64_t ri = rec_reserve();
  void *q = NULL;
  uint64_t size;
  uint32_t id;
  size_t prev;
  if (!ur_registry_find(p, &size, &id)) {
    if (!bad_pointer(p, "realloc")) q = __libc_realloc(p, n); /* never went through us */
    if (q && !D.header) { /* the program has it now (a header-less block has no tag to check) */
      ur_announce_out(s, q, n);
      ur_registry_set(q, n, ur_maybe_capture(n));
    }
    goto out;
  }
  if (bad_tag(p, "realloc")) goto out;
  if (D.header) {
    struct hdr *h = hdr_of(p);
    check_guards(p, h, id);
    if (n == h->size || n < h->usable) { /* same size, or shrinking: in place */
      h->size = n;
      if (D.rear) {
        h->usable = n;
        memset((uint8_t *)p + n, REAR_GUARD_VALUE, D.rear);
      }
      ur_announce_out(s, p, n);
      ur_registry_set(p, n, ur_maybe_capture(n)); /* every realloc re-records the site */
      q = p;
      goto out;
    }
    prev = h->usable;
  } else {
    size_t usable = ur_real_usable_size(p), real;
    if (__builtin_add_overflow(n, D.expand, &real)) {
      errno = ENOMEM;
      goto out;
    }
    if (usable && real <= usable) { /* fits: glibc shrinks in place */
      q = __libc_realloc(p, real);
      if (q) {
        ur_announce_out(s, q, n);
        if (q == p) {
          ur_registry_set(q, n, ur_maybe_capture(n));
        } else {
          ur_registry_insert(q, n, ur_maybe_capture(n));
          ur_registry_remove(p);
        }
      }
      goto out;
    }
    prev = usable;
  }
  /* Move: the new block is announced and registered before the old one goes
   * (malloc_api.c move_block explains why), and the old one takes the free
   * path: fill_on_free, free_track. */
  q = alloc_block(n, 0, false);
  if (!q) {
    errno = ENOMEM;
    goto out;
  }
  fill_alloc(q); /* then the copy: what lies above the old usable size stays 0xeb */
  ur_announce_out(s, q, n);
  size_t qusable = usable_of(q);
  memcpy(q, p, prev < qusable ? prev : qusable);
  ur_registry_insert(q, n, ur_maybe_capture(n));
  ur_registry_remove(p);
  release_block(p, id, false); /* guards were checked above */
out:
  rec_commit(ri, REC_REALLOC, UR_MANGLE(q), UR_MANGLE(p), n);
  ur_leave(s);
  return q;
}

size_t ur_dbg_usable_size(void *p) {
  if (!p) return 0;
  struct ur_thread_slot *s = ur_begin(UR_OP_INTERNAL, NULL, 0);
  if (UR_UNLIKELY(!s)) return ur_real_usable_size(p);
  int saved = errno; /* a report's backtrace may change it; glibc's never does */
  uint64_t size;
  uint32_t id;
  size_t r;
  if (!ur_registry_find(p, &size, &id))
    r = bad_pointer(p, "malloc_usable_size") ? 0 : ur_real_usable_size(p);
  else if (bad_tag(p, "malloc_usable_size"))
    r = 0;
  else
    r = (size_t)size; /* what a scan reads: see malloc_usable_size in malloc_api.c */
  ur_leave(s);
  errno = saved;
  return r;
}

/* ---- heap dumps ----------------------------------------------------------- */

struct drec {
  uint64_t a; /* size (dump) or mangled pointer (leaks) */
  uint64_t b; /* size (leaks) */
  uint32_t id;
  uint32_t pad;
};

typedef bool (*before_fn)(const struct drec *, const struct drec *);

static void sift(struct drec *r, size_t i, size_t n, before_fn before) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && before(&r[c], &r[c + 1])) c++;
    if (!before(&r[i], &r[c])) return;
    struct drec t = r[i];
    r[i] = r[c];
    r[c] = t;
    i = c;
  }
}

/* Heapsort: no allocation, no recursion. */
static void sort_recs(struct drec *r, size_t n, before_fn before) {
  for (size_t i = n / 2; i-- > 0;) sift(r, i, n, before);
  for (size_t end = n; end-- > 1;) {
    struct drec t = r[0];
    r[0] = r[end];
    r[end] = t;
    sift(r, 0, end, before);
  }
}

/* -1, 0, 1: backtrace order of write_dump (present first, deeper first, pcs). */
static int cmp_stacks(uint32_t ia, uint32_t ib) {
  if (ia == ib) return 0;
  size_t na, nb;
  const uint64_t *fa = ur_stacks_frames(ia, &na), *fb = ur_stacks_frames(ib, &nb);
  if ((na > 0) != (nb > 0)) return na > 0 ? -1 : 1;
  if (na != nb) return na > nb ? -1 : 1;
  for (size_t i = 0; i < na; i++)
    if (fa[i] != fb[i]) return fa[i] < fb[i] ? -1 : 1;
  return 0;
}

static bool dump_before(const struct drec *x, const struct drec *y) {
  if (x->a != y->a) return x->a > y->a; /* size descending */
  return cmp_stacks(x->id, y->id) < 0;
}

/* PointerData::GetList's order for leak_track. */
static bool leak_before(const struct drec *x, const struct drec *y) {
  if (x->b != y->b) return x->b > y->b;
  size_t na, nb;
  ur_stacks_frames(x->id, &na);
  ur_stacks_frames(y->id, &nb);
  if ((na > 0) != (nb > 0)) return na > 0;
  if (na != nb) return na > nb;
  return UR_UNMANGLE(x->a) < UR_UNMANGLE(y->a);
}

struct collect_ctx {
  struct drec *r;
  size_t n, cap;
  bool leaks;
};

static void collect_one(uint64_t key, uint64_t size, uint32_t stack_id, void *arg) {
  struct collect_ctx *c = arg;
  if (c->n >= c->cap || ur_helper_owns(key)) return; /* the helper's, not the program's */
  struct drec *d = &c->r[c->n++];
  d->a = c->leaks ? key : size; /* pointers stay mangled in the copy */
  d->b = size;
  d->id = stack_id;
  d->pad = 0;
}

/* Every live allocation, copied under malloc_disable (one consistent set). */
static struct drec *collect(size_t *count, size_t *bytes, bool leaks) {
  malloc_disable();
  size_t total = (size_t)ur_registry_count();
  size_t cap = total ? total : 1;
  *bytes = cap * sizeof(struct drec);
  void *m = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  struct collect_ctx c = {m == MAP_FAILED ? NULL : m, 0, cap, leaks};
  if (c.r) ur_registry_foreach(0, collect_one, &c); /* disabled: nothing moves */
  malloc_enable();
  *count = c.n;
  return c.r;
}

static void fingerprint(char *out, size_t len) {
  struct utsname u;
  if (uname(&u) == 0)
    snprintf(out, len, "%s/%s/%s", u.sysname, u.release, u.machine);
  else
    snprintf(out, len, "unknown");
}

static void dump_heap(const char *path) {
  const char *why;
  int fd = open_output(path, &why);
  if (fd < 0) {
    dlog("Unable to create file: %s: %s", path, why ? why : strerrordesc_np(errno));
    return;
  }
  dlog("Dumping to file: %s", path);
  size_t n, mapped;
  struct drec *r = collect(&n, &mapped, false);
  if (!r) n = 0;
  if (r) sort_recs(r, n, dump_before);
  size_t groups = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    total += r[i].a;
    if (i == 0 || r[i].a != r[i - 1].a || r[i].id != r[i - 1].id) groups++;
  }
  static struct bw w; /* dumps are serialised: the helper, or exit */
  char fp[256];
  fingerprint(fp, sizeof fp);
  w.fd = fd;
  w.len = 0;
  bw_printf(&w,
            "Android Native Heap Dump v1.2\n\nBuild fingerprint: '%s'\n\nTotal memory: %" PRIu64
            "\nAllocation records: %zu\nBacktrace size: %u\n\n",
            fp, total, groups, ur_g.bt_frames);
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && r[j].a == r[i].a && r[j].id == r[i].id) j++;
    bw_printf(&w, "z 0  sz %8" PRIu64 "  num    %zu  bt", r[i].a, j - i);
    size_t nf;
    const uint64_t *f = ur_stacks_frames(r[i].id, &nf);
    for (size_t k = 0; k < nf; k++) bw_printf(&w, " %" PRIx64, f[k]);
    bw_printf(&w, "\n");
    if (D.o.backtrace_full && nf) {
      bw_printf(&w, "  bt_info");
      for (size_t k = 0; k < nf; k++) {
        struct pc_name pn = name_pc((uintptr_t)f[k]);
        bw_printf(&w, " {\"%s\" %" PRIxPTR " \"%s\" %" PRIxPTR "}", pn.file, pn.rel,
                  pn.sym ? pn.sym : "", pn.off);
      }
      bw_printf(&w, "\n");
    }
    i = j;
  }
  bw_printf(&w, "MAPS\n");
  bw_flush(&w);
  int maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (maps >= 0) {
    ssize_t got;
    while ((got = read(maps, w.buf, sizeof w.buf)) > 0 || (got < 0 && errno == EINTR)) {
      if (got <= 0) continue;
      w.len = (size_t)got;
      bw_flush(&w);
    }
    close(maps);
  }
  bw_printf(&w, "END\n");
  bw_flush(&w);
  close(fd);
  if (r) munmap(r, mapped);
}

static void log_leaks(void) {
  size_t n, mapped;
  struct drec *r = collect(&n, &mapped, true);
  if (!r) return;
  sort_recs(r, n, leak_before);
  for (size_t i = 0; i < n; i++) {
    dlog("+++ %s leaked block of size %" PRIu64 " at 0x%" PRIxPTR " (leak %zu of %zu)", D.prog,
         r[i].b, UR_UNMANGLE(r[i].a), i + 1, n);
    if (r[i].id) {
      dlog("Backtrace at time of allocation:");
      log_stack_id(r[i].id);
    }
  }
  munmap(r, mapped);
}

/* ---- allocator statistics, unreachable check ----------------------------- */

static void log_stats(void) {
  dlog("Logging allocator stats...");
  malloc_stats();              /* glibc: per-arena totals, on stderr */
  malloc_info(0, stderr);      /* glibc: the full XML description */
  fflush(stderr);
}

static void check_unreachable(void) {
  dlog("Starting to check for unreachable memory.");
  const char *path = D.notify_path;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  memcpy(addr.sun_path, path, strlen(path));
  struct timeval tv = {.tv_sec = 10};
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    dlog("Unreachable check failed: no unreachabled at %s: %s", path, strerrordesc_np(errno));
    if (fd >= 0) close(fd);
    return;
  }
  char req[32], reply[128];
  int len = snprintf(req, sizeof req, "SCAN %d\n", (int)getpid());
  size_t got = 0;
  if (send(fd, req, (size_t)len, MSG_NOSIGNAL) == len) {
    ssize_t r;
    while (got < sizeof reply - 1 && !memchr(reply, '\n', got) &&
           ((r = read(fd, reply + got, sizeof reply - 1 - got)) > 0 || (r < 0 && errno == EINTR)))
      if (r > 0) got += (size_t)r;
  }
  close(fd);
  reply[got] = '\0';
  char *nl = strchr(reply, '\n');
  if (nl) *nl = '\0';
  if (strcmp(reply, "OK") == 0 || strncmp(reply, "OK ", 3) == 0) {
    if (D.o.verbose) dlog("Unreachable check requested from unreachabled at %s", path);
  } else if (strcmp(reply, "BUSY") == 0) {
    dlog("Unreachable check already pending");
  } else if (got) {
    dlog("Unreachable check failed: unreachabled at %s replied: %s", path, reply);
  } else {
    dlog("Unreachable check failed: no reply from unreachabled at %s", path);
  }
}

void ur_debug_helper_work(uint32_t req) {
  char path[UR_OPTION_PATH_MAX + 64];
  if ((req & UR_REQ_DUMP_HEAP) && D.backtrace) {
    snprintf(path, sizeof path, "%s.%d.txt", D.o.backtrace_dump_prefix, (int)getpid());
    dump_heap(path);
  }
  if ((req & UR_REQ_RECORD_DUMP) && D.rec) rec_dump(D.o.record_allocs_file);
  if ((req & UR_REQ_STATS) && D.o.log_allocator_stats_on_signal) log_stats();
  if ((req & UR_REQ_UNREACHABLE) && D.o.check_unreachable_on_signal) check_unreachable();
}

/* ---- set-up, signals, exit ------------------------------------------------ */

int ur_debug_configure(const struct ur_options *o) {
  D.o = *o;
  D.prog = "<unknown>";
  D.backtrace = o->backtrace || o->backtrace_enable_on_signal;
  D.front = o->front_guard_bytes;
  D.rear = o->rear_guard_bytes;
  D.header = D.front || D.rear;
  D.offset = D.header ? sizeof(struct hdr) + D.front : 0;
  D.expand = o->expand_alloc_bytes;
  D.extra = D.offset + D.rear + D.expand;
  D.fill_alloc = o->fill_on_alloc_bytes;
  D.fill_free = o->fill_on_free_bytes;
  if (o->free_track_allocations) {
    D.ft_cap = o->free_track_allocations;
    D.ft_frames = o->free_track_backtrace_num_frames;
    D.ft_stride = sizeof(struct ft_entry) + D.ft_frames * sizeof(uint64_t);
    D.ft = ur_region_alloc(D.ft_cap * D.ft_stride);
    if (!D.ft) return -1;
  }
  if (o->record_allocs) {
    D.rec_total = o->record_allocs;
    D.rec = ur_region_alloc(D.rec_total * sizeof(struct rec));
    if (!D.rec) return -1;
  }
  bool on = D.header || D.fill_alloc || D.fill_free || D.expand || D.ft_cap || D.rec ||
            o->verify_pointers;
  /* Error reports and leak_track print backtraces of their own. */
  if (on || o->leak_track) ur_unwind_init();
  return on ? 1 : 0;
}

static void on_backtrace_signal(int sig) {
  (void)sig;
  __atomic_fetch_xor(&ur_g.bt_active, 1, __ATOMIC_RELAXED);
}

/* Only posts the request: the helper thread does the work. */
static void on_request_signal(int sig) {
  uint32_t bit = 0;
  if (sig == D.sig_dump) bit = UR_REQ_DUMP_HEAP;
  else if (sig == D.sig_record) bit = UR_REQ_RECORD_DUMP;
  else if (sig == D.sig_stats) bit = UR_REQ_STATS;
  else if (sig == D.sig_unreachable) bit = UR_REQ_UNREACHABLE;
  if (bit) ur_helper_request(bit);
}

static void install(int sig, void (*fn)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

void ur_debug_start(const char *progname) {
  D.prog = progname;
  const struct ur_options *o = &D.o;
  int pid = (int)getpid();
  /* bionic's signals, from glibc's SIGRTMAX at run time. */
  D.sig_bt = SIGRTMAX - 19;
  D.sig_dump = SIGRTMAX - 17;
  D.sig_record = SIGRTMAX - 18;
  D.sig_stats = SIGRTMAX - 15;
  D.sig_unreachable = SIGRTMAX - 16;
  const char *env = getenv("UNREACHABLE_NOTIFY_SOCKET");
  snprintf(D.notify_path, sizeof D.notify_path, "%s",
           env && *env ? env : DEFAULT_NOTIFY_SOCKET);
  if (o->backtrace_enable_on_signal) install(D.sig_bt, on_backtrace_signal);
  if (D.backtrace) install(D.sig_dump, on_request_signal);
  if (D.rec) install(D.sig_record, on_request_signal);
  if (o->check_unreachable_on_signal) install(D.sig_unreachable, on_request_signal);
  if (o->log_allocator_stats_on_signal) install(D.sig_stats, on_request_signal);
  if (!o->verbose) return;
  if (o->backtrace_enable_on_signal)
    dlog("%s: Run: 'kill -%d %d' to enable backtracing.", D.prog, D.sig_bt, pid);
  if (D.backtrace)
    dlog("%s: Run: 'kill -%d %d' to dump the backtrace.", D.prog, D.sig_dump, pid);
  if (D.rec)
    dlog("%s: Run: 'kill -%d %d' to dump the allocation records.", D.prog, D.sig_record, pid);
  if (o->check_unreachable_on_signal)
    dlog("%s: Run: 'kill -%d %d' to check for unreachable memory.", D.prog, D.sig_unreachable,
         pid);
  if (o->log_allocator_stats_on_signal)
    dlog("%s: Run: 'kill -%d %d' to log allocator stats.", D.prog, D.sig_stats, pid);
}

static void verify_all_freed(void) {
  if (!ur_tid_lock(&D.ft_lock, ur_self_tid())) return;
  for (size_t i = 0; i < D.ft_count; i++) {
    struct ft_entry *e = ft_at(D.ft_head + i);
    ft_verify(UR_UNMANGLE(e->ptr), e->frames, e->nframes);
  }
  ur_tid_unlock(&D.ft_lock);
}

void ur_debug_after_fork_child(void) {
  /* Only the forking thread survives: whoever held these is gone. */
  D.ft_lock = 0;
  D.rec_lock = D.rec_owner = 0;
  D.rec_inflight = 0;
  D.rec_dumping = 0;
}

void ur_debug_at_exit(void) {
  if (__atomic_exchange_n(&D.exited, 1, __ATOMIC_ACQ_REL)) return;
  const struct ur_options *o = &D.o;
  char path[UR_OPTION_PATH_MAX + 64];
  if (D.ft_cap) verify_all_freed();
  if (o->leak_track) log_leaks();
  if (D.backtrace && o->backtrace_dump_on_exit) {
    snprintf(path, sizeof path, "%s.%d.exit.txt", o->backtrace_dump_prefix, (int)getpid());
    dump_heap(path);
  }
  if (D.rec && o->record_allocs_on_exit) {
    snprintf(path, sizeof path, "%s.%d", o->record_allocs_file, (int)getpid());
    rec_dump(path);
  }
  if (o->log_allocator_stats_on_exit) log_stats();
}
