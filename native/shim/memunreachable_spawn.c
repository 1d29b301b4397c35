/*
 * Starting the scanner for the libmemunreachable interface and collecting
 * what it writes (memunreachable_spawn.h):
 *
 *   1. posix_spawn (not fork: other threads may hold locks we know nothing
 *      about) /bin/sh, which waits for a go byte on its stdin, then execs
 *      $UNREACHABLE_CLI, else unreachable-cli from PATH, else
 *      `python3 -m unreachable.cli.main`, as `scan --format lmu-records PID`;
 *   2. prctl(PR_SET_PTRACER, child) so Yama's ptrace_scope=1 lets the child
 *      trace its parent, then send the go byte (no race with the attach);
 *   3. read the child's stdout (the report) and stderr (why it failed) until
 *      EOF, bounded by a deadline, then reap it.
 *
 * While the scanner stops every thread, this one sits in poll() holding no
 * lock the others need, and its stack and registers are roots like any other
 * thread's. Nothing here goes through malloc while the scan runs: buffers are
 * mmap'ed. posix_spawn's file actions allocate, but before the child is
 * released and freed before it scans.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memunreachable_spawn.h"

extern char **environ;

#define DEFAULT_TIMEOUT_S 60
#define MAX_OUTPUT ((size_t)256 << 20)

/* The child's program. $0 is a label, "$@" the scan arguments. A failed exec
 * makes sh exit 127, which the caller reports as "no scanner found". */
static const char script[] =
    "IFS= read -r _ || exit 125\n"
    "if [ -n \"${UNREACHABLE_CLI:-}\" ]; then eval \"exec $UNREACHABLE_CLI \\\"\\$@\\\"\"; exit 127; fi\n"
    "if command -v unreachable-cli >/dev/null 2>&1; then exec unreachable-cli \"$@\"; fi\n"
    "exec python3 -m unreachable.cli.main \"$@\"\n";

static void *map_zeroed(size_t n) {
  void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static size_t page_round(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) / pg * pg;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int timeout_s(void) {
  const char *v = getenv("UNREACHABLE_LMU_TIMEOUT");
  if (v && *v) {
    char *end;
    long s = strtol(v, &end, 10);
    if (*end == '\0' && s > 0 && s < 86400) return (int)s;
  }
  return DEFAULT_TIMEOUT_S;
}

/* Move fd to a number >= 3 (so dup2 onto 0-2 in the child always clears
 * close-on-exec), close-on-exec in this process. */
static int high_fd(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int h = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return h;
}

static void fail(char *error, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(char *error, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error, size, fmt, ap);
  va_end(ap);
}

/* ---- the child's environment: ours without the shim in LD_PRELOAD ------- */

struct child_env {
  char **envp;
  size_t map_size;
};

static int is_shim(const char *tok, size_t n) {
  static const char name[] = "unreachable_shim";
  size_t k = sizeof name - 1;
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(tok + i, name, k) == 0) return 1;
  return 0;
}

static int build_env(struct child_env *ce) {
  size_t n = 0, preload_len = 0;
  for (char **e = environ; e && *e; e++, n++)
    if (strncmp(*e, "LD_PRELOAD=", 11) == 0) preload_len += strlen(*e) + 1;
  ce->map_size = page_round((n + 1) * sizeof(char *) + preload_len + 1);
  char **envp = map_zeroed(ce->map_size);
  if (!envp) return -1;
  char *spare = (char *)(envp + n + 1);
  size_t out = 0;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) {
      envp[out++] = *e;
      continue;
    }
    /* Keep every other preloaded object; ld.so separates by space or colon. */
    const char *v = *e + 11;
    char *dst = spare;
    memcpy(dst, "LD_PRELOAD=", 11);
    char *w = dst + 11;
    while (*v) {
      size_t len = strcspn(v, " :");
      if (len && !is_shim(v, len)) {
        if (w != dst + 11) *w++ = ':';
        memcpy(w, v, len);
        w += len;
      }
      v += len;
      while (*v == ' ' || *v == ':') v++;
    }
    *w++ = '\0';
    spare = w;
    if (w - dst > 12) envp[out++] = dst;
  }
  envp[out] = NULL;
  ce->envp = envp;
  return 0;
}

/* ---- reading the child ---------------------------------------------------- */

struct outbuf {
  char *p;
  size_t len, cap;
};

static int outbuf_reserve(struct outbuf *b, size_t want) {
  if (b->len + want <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 64 * 1024;
  while (cap < b->len + want) cap *= 2;
  if (cap > MAX_OUTPUT) return -1;
  void *p = b->p ? mremap(b->p, b->cap, cap, MREMAP_MAYMOVE) : map_zeroed(cap);
  if (p == MAP_FAILED || p == NULL) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

struct tail {
  char buf[LMU_TAIL_BYTES];
  size_t len;
};

static void tail_add(struct tail *t, const char *s, size_t n) {
  if (n >= sizeof t->buf) {
    s += n - sizeof t->buf / 2;
    n = sizeof t->buf / 2;
  }
  if (t->len + n > sizeof t->buf) {
    size_t drop = t->len + n - sizeof t->buf;
    memmove(t->buf, t->buf + drop, t->len - drop);
    t->len -= drop;
  }
  memcpy(t->buf + t->len, s, n);
  t->len += n;
}

/* The last non-empty line of what the child wrote to stderr. */
static const char *tail_line(struct tail *t) {
  size_t end = t->len;
  while (end && (t->buf[end - 1] == '\n' || t->buf[end - 1] == '\r' || t->buf[end - 1] == ' '))
    end--;
  size_t start = end;
  while (start && t->buf[start - 1] != '\n') start--;
  if (end >= sizeof t->buf) end = sizeof t->buf - 1;
  t->buf[end] = '\0';
  return t->buf + start;
}

/* ---- one run of the scanner ----------------------------------------------- */

static void kill_child(pid_t pid) {
  kill(-pid, SIGKILL); /* its process group: anything UNREACHABLE_CLI started */
  kill(pid, SIGKILL);
}

/* Reap the child; -1 if it cannot be (someone else reaped it: status unknown). */
static int reap(pid_t pid, int64_t deadline, int *status, int *timed_out) {
  for (;;) {
    pid_t w = waitpid(pid, status, WNOHANG);
    if (w == pid) return 0;
    if (w < 0 && errno != EINTR) return -1;
    if (w == 0 && now_ms() >= deadline) {
      *timed_out = 1;
      kill_child(pid);
      while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR) return -1;
      return 0;
    }
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

int lmu_run_scanner(unsigned flags, size_t limit, struct lmu_output *o, char *error,
                    size_t error_size) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, go[2] = {-1, -1};
  struct outbuf b = {0};
  struct tail *tail = map_zeroed(sizeof(struct tail));
  struct child_env ce = {0};
  int ok = -1;
  pid_t pid = -1;
  memset(o, 0, sizeof *o);
  if (!tail) {
    fail(error, error_size, "out of memory");
    return -1;
  }
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) != 0) {
    fail(error, error_size, "cannot create pipes: %s", strerror(errno));
    goto out;
  }
  for (int i = 0; i < 2; i++) {
    out[i] = high_fd(out[i]);
    err[i] = high_fd(err[i]);
    go[i] = high_fd(go[i]);
  }
  if (out[0] < 0 || out[1] < 0 || err[0] < 0 || err[1] < 0 || go[0] < 0 || go[1] < 0) {
    fail(error, error_size, "cannot create pipes: %s", strerror(errno));
    goto out;
  }
  if (build_env(&ce) != 0) {
    fail(error, error_size, "out of memory");
    goto out;
  }

  char pidbuf[24], limitbuf[24];
  snprintf(pidbuf, sizeof pidbuf, "%ld", (long)getpid());
  snprintf(limitbuf, sizeof limitbuf, "%zu", limit);
  char *argv[12];
  int ac = 0;
  argv[ac++] = (char *)"sh";
  argv[ac++] = (char *)"-c";
  argv[ac++] = (char *)script;
  argv[ac++] = (char *)"unreachable-lmu";
  argv[ac++] = (char *)"scan";
  argv[ac++] = (char *)"--format";
  argv[ac++] = (char *)"lmu-records";
  argv[ac++] = (char *)"--limit";
  argv[ac++] = limitbuf;
  if (flags & UNREACHABLE_LMU_CONTENTS) argv[ac++] = (char *)"--contents";
  argv[ac++] = pidbuf;
  argv[ac] = NULL;

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc == 0) {
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_adddup2(&fa, go[1], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
    posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* none of our fds for the scanner */
#endif
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, ce.envp);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
  }
  munmap(ce.envp, ce.map_size);
  ce.envp = NULL;
  close(out[1]);
  close(err[1]);
  close(go[1]);
  out[1] = err[1] = go[1] = -1;
  if (rc != 0) {
    pid = -1;
    fail(error, error_size, "no scanner found: cannot start /bin/sh: %s", strerror(rc));
    goto out;
  }

  /* Let the child trace us under Yama ptrace_scope=1 (EINVAL without Yama),
   * then let it go. */
  prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0);
  ssize_t sent;
  do sent = send(go[0], "\n", 1, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  close(go[0]);
  go[0] = -1;

  int64_t deadline = now_ms() + (int64_t)timeout_s() * 1000;
  int timed_out = 0, too_big = 0;
  struct pollfd pfd[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  while (pfd[0].fd >= 0 || pfd[1].fd >= 0) {
    int64_t left = deadline - now_ms();
    if (left <= 0) {
      timed_out = 1;
      break;
    }
    int n = poll(pfd, 2, left > 1000 ? 1000 : (int)left);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    for (int i = 0; i < 2; i++) {
      if (pfd[i].fd < 0 || !pfd[i].revents) continue;
      char chunk[4096];
      char *dst = chunk;
      size_t room = sizeof chunk;
      if (i == 0) {
        if (outbuf_reserve(&b, 65536) != 0) {
          too_big = 1;
          goto stop_reading;
        }
        dst = b.p + b.len;
        room = b.cap - b.len;
      }
      ssize_t got = read(pfd[i].fd, dst, room);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        close(pfd[i].fd);
        if (i == 0) out[0] = -1;
        else err[0] = -1;
        pfd[i].fd = -1;
        continue;
      }
      if (i == 0) b.len += (size_t)got;
      else tail_add(tail, chunk, (size_t)got);
    }
  }
stop_reading:
  if (timed_out || too_big) kill_child(pid);

  int status = 0, reap_timeout = 0;
  int reaped = reap(pid, timed_out || too_big ? now_ms() : deadline, &status, &reap_timeout);
  pid = -1;
  timed_out |= reap_timeout;
  const char *why = tail_line(tail);
  int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  const char *hint = dumpable == 0 ? " (this process is not dumpable: PR_SET_DUMPABLE is 0)" : "";

  if (timed_out) {
    fail(error, error_size, "the scanner did not finish within %d s and was killed%s%s",
         timeout_s(), *why ? ": " : "", why);
  } else if (too_big) {
    fail(error, error_size, "the scanner's report exceeds %zu MiB", MAX_OUTPUT >> 20);
  } else if (reaped == 0 && WIFSIGNALED(status)) {
    fail(error, error_size, "the scanner was killed by signal %d%s%s", WTERMSIG(status),
         *why ? ": " : "", why);
  } else if (reaped == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    fail(error, error_size,
         "no scanner found (set UNREACHABLE_CLI, or put unreachable-cli or python3 on PATH)%s%s",
         *why ? ": " : "", why);
  } else if (reaped == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 126) {
    fail(error, error_size, "the scanner cannot be executed%s%s", *why ? ": " : "", why);
  } else if (reaped == 0 && WIFEXITED(status) && WEXITSTATUS(status) > 1) {
    fail(error, error_size, "%s%s", *why ? why : "the scan failed", hint);
  } else {
    ok = 0;
    o->data = b.p;
    o->len = b.len;
    o->cap = b.cap;
    o->reaped = reaped;
    o->status = status;
    size_t n = strlen(why) < sizeof o->why - 1 ? strlen(why) : sizeof o->why - 1;
    memcpy(o->why, why, n);
    o->why[n] = '\0';
    o->hint = hint;
    b.p = NULL; /* now o's */
  }

out:
  if (pid > 0) {
    kill_child(pid);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  prctl(PR_SET_PTRACER, 0, 0, 0, 0);
  for (int i = 0; i < 2; i++) {
    if (out[i] >= 0) close(out[i]);
    if (err[i] >= 0) close(err[i]);
    if (go[i] >= 0) close(go[i]);
  }
  if (ce.envp) munmap(ce.envp, ce.map_size);
  if (b.p) munmap(b.p, b.cap);
  munmap(tail, sizeof(struct tail));
  return ok;
}


void lmu_output_free(struct lmu_output *o) {
  if (o->data) munmap(o->data, o->cap);
  o->data = NULL;
  o->len = o->cap = 0;
}
