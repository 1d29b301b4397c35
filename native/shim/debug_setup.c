/*
 * malloc_debug's life cycle (debug_setup.h): the options turned into the
 * settings every feature reads, the signals and the work they ask of the
 * helper thread (dumps, allocator statistics, a scan by unreachabled), the
 * fork child's reset and the checks at exit.
 */
#include "debug_setup.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "debug_config.h"
#include "debug_dump.h"
#include "debug_guard.h"
#include "debug_log.h"
#include "debug_pointers.h"
#include "debug_record.h"
#include "helper.h"
#include "region.h"
#include "state.h"
#include "unwind.h"

#define DEFAULT_NOTIFY_SOCKET "/run/unreachable/notify.sock"

/* ---- allocator statistics, unreachable check ----------------------------- */

static void log_stats(void) {
  ur_dlog("Logging allocator stats...");
  malloc_stats();              /* glibc: per-arena totals, on stderr */
  malloc_info(0, stderr);      /* glibc: the full XML description */
  fflush(stderr);
}

/* The daemon's reply, up to its close: a code line, and after BUSY a line
 * saying why (a daemon older than that line sends the code alone). */
static size_t read_reply(int fd, char *reply, size_t size) {
  size_t got = 0;
  ssize_t r;
  while (got < size - 1 &&
         ((r = read(fd, reply + got, size - 1 - got)) > 0 || (r < 0 && errno == EINTR)))
    if (r > 0) got += (size_t)r;
  reply[got] = '\0';
  return got;
}

static void say_reply(const char *path, char *reply, size_t got) {
  char *why = strchr(reply, '\n');
  if (why) {
    *why++ = '\0';
    why[strcspn(why, "\n")] = '\0';
  }
  if (strcmp(reply, "OK") == 0 || strncmp(reply, "OK ", 3) == 0) {
    if (ur_debug.o.verbose) ur_dlog("Unreachable check requested from unreachabled at %s", path);
  } else if (strcmp(reply, "BUSY") == 0 && why && strcmp(why, "user") == 0) {
    ur_dlog("Unreachable check not queued: unreachabled at %s is busy with as many scans"
            " of this user's processes as it takes; try again later", path);
  } else if (strcmp(reply, "BUSY") == 0) {
    ur_dlog("Unreachable check already pending");
  } else if (got) {
    ur_dlog("Unreachable check failed: unreachabled at %s replied: %s", path, reply);
  } else {
    ur_dlog("Unreachable check failed: no reply from unreachabled at %s", path);
  }
}

static void check_unreachable(void) {
  ur_dlog("Starting to check for unreachable memory.");
  const char *path = ur_debug.notify_path;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  memcpy(addr.sun_path, path, strlen(path));
  struct timeval tv = {.tv_sec = 10};
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    ur_dlog("Unreachable check failed: no unreachabled at %s: %s", path, strerrordesc_np(errno));
    if (fd >= 0) close(fd);
    return;
  }
  char req[32], reply[128];
  int len = snprintf(req, sizeof req, "SCAN %d\n", (int)getpid());
  size_t got = 0;
  reply[0] = '\0';
  if (send(fd, req, (size_t)len, MSG_NOSIGNAL) == len) got = read_reply(fd, reply, sizeof reply);
  close(fd);
  say_reply(path, reply, got);
}

/* On the helper thread: the requests the signal handlers posted. */
static void helper_work(uint32_t req) {
  char path[UR_OPTION_PATH_MAX + 64];
  if ((req & UR_REQ_DUMP_HEAP) && ur_debug.backtrace) {
    snprintf(path, sizeof path, "%s.%d.txt", ur_debug.o.backtrace_dump_prefix, (int)getpid());
    ur_dump_heap(path);
  }
  if ((req & UR_REQ_RECORD_DUMP) && ur_debug.rec) ur_rec_dump(ur_debug.o.record_allocs_file);
  if ((req & UR_REQ_STATS) && ur_debug.o.log_allocator_stats_on_signal) log_stats();
  if ((req & UR_REQ_UNREACHABLE) && ur_debug.o.check_unreachable_on_signal) check_unreachable();
}

/* ---- set-up, signals, exit ------------------------------------------------ */

int ur_debug_configure(const struct ur_options *o) {
  ur_debug.o = *o;
  ur_debug.prog = "<unknown>";
  ur_debug.backtrace = o->backtrace || o->backtrace_enable_on_signal;
  ur_debug.front = o->front_guard_bytes;
  ur_debug.rear = o->rear_guard_bytes;
  ur_debug.header = ur_debug.front || ur_debug.rear;
  ur_debug.offset = ur_debug.header ? sizeof(struct ur_hdr) + ur_debug.front : 0;
  ur_debug.expand = o->expand_alloc_bytes;
  ur_debug.extra = ur_debug.offset + ur_debug.rear + ur_debug.expand;
  ur_debug.fill_alloc = o->fill_on_alloc_bytes;
  ur_debug.fill_free = o->fill_on_free_bytes;
  if (o->free_track_allocations) {
    ur_debug.ft_cap = o->free_track_allocations;
    ur_debug.ft_frames = o->free_track_backtrace_num_frames;
    ur_debug.ft_stride = sizeof(struct ur_ft_entry) + ur_debug.ft_frames * sizeof(uint64_t);
    ur_debug.ft = ur_region_alloc(ur_debug.ft_cap * ur_debug.ft_stride);
    if (!ur_debug.ft) return -1;
  }
  if (o->record_allocs) {
    ur_debug.rec_total = o->record_allocs;
    ur_debug.rec = ur_region_alloc(ur_debug.rec_total * sizeof(struct ur_rec));
    if (!ur_debug.rec) return -1;
  }
  bool on = ur_debug.header || ur_debug.fill_alloc || ur_debug.fill_free || ur_debug.expand ||
            ur_debug.ft_cap || ur_debug.rec || o->verify_pointers;
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
  if (sig == ur_debug.sig_dump) bit = UR_REQ_DUMP_HEAP;
  else if (sig == ur_debug.sig_record) bit = UR_REQ_RECORD_DUMP;
  else if (sig == ur_debug.sig_stats) bit = UR_REQ_STATS;
  else if (sig == ur_debug.sig_unreachable) bit = UR_REQ_UNREACHABLE;
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
  ur_debug.prog = progname;
  ur_helper_on_requests(helper_work);
  const struct ur_options *o = &ur_debug.o;
  int pid = (int)getpid();
  /* bionic's signals, from glibc's SIGRTMAX at run time. */
  ur_debug.sig_bt = SIGRTMAX - 19;
  ur_debug.sig_dump = SIGRTMAX - 17;
  ur_debug.sig_record = SIGRTMAX - 18;
  ur_debug.sig_stats = SIGRTMAX - 15;
  ur_debug.sig_unreachable = SIGRTMAX - 16;
  const char *env = getenv("UNREACHABLE_NOTIFY_SOCKET");
  snprintf(ur_debug.notify_path, sizeof ur_debug.notify_path, "%s",
           env && *env ? env : DEFAULT_NOTIFY_SOCKET);
  if (o->backtrace_enable_on_signal) install(ur_debug.sig_bt, on_backtrace_signal);
  if (ur_debug.backtrace) install(ur_debug.sig_dump, on_request_signal);
  if (ur_debug.rec) install(ur_debug.sig_record, on_request_signal);
  if (o->check_unreachable_on_signal) install(ur_debug.sig_unreachable, on_request_signal);
  if (o->log_allocator_stats_on_signal) install(ur_debug.sig_stats, on_request_signal);
  if (!o->verbose) return;
  if (o->backtrace_enable_on_signal)
    ur_dlog("%s: Run: 'kill -%d %d' to enable backtracing.", ur_debug.prog, ur_debug.sig_bt, pid);
  if (ur_debug.backtrace)
    ur_dlog("%s: Run: 'kill -%d %d' to dump the backtrace.", ur_debug.prog, ur_debug.sig_dump, pid);
  if (ur_debug.rec)
    ur_dlog("%s: Run: 'kill -%d %d' to dump the allocation records.", ur_debug.prog,
            ur_debug.sig_record, pid);
  if (o->check_unreachable_on_signal)
    ur_dlog("%s: Run: 'kill -%d %d' to check for unreachable memory.", ur_debug.prog,
            ur_debug.sig_unreachable, pid);
  if (o->log_allocator_stats_on_signal)
    ur_dlog("%s: Run: 'kill -%d %d' to log allocator stats.", ur_debug.prog, ur_debug.sig_stats,
            pid);
}

void ur_debug_after_fork_child(void) {
  /* Only the forking thread survives: whoever held these is gone. */
  ur_debug.ft_lock = 0;
  ur_debug.rec_lock = 0;
  ur_debug.rec_inflight = 0;
  ur_debug.rec_dumping = 0;
}

void ur_debug_at_exit(void) {
  if (__atomic_exchange_n(&ur_debug.exited, 1, __ATOMIC_ACQ_REL)) return;
  const struct ur_options *o = &ur_debug.o;
  char path[UR_OPTION_PATH_MAX + 64];
  if (ur_debug.ft_cap) ur_verify_all_freed();
  if (o->leak_track) ur_log_leaks();
  if (ur_debug.backtrace && o->backtrace_dump_on_exit) {
    snprintf(path, sizeof path, "%s.%d.exit.txt", o->backtrace_dump_prefix, (int)getpid());
    ur_dump_heap(path);
  }
  if (ur_debug.rec && o->record_allocs_on_exit) {
    snprintf(path, sizeof path, "%s.%d", o->record_allocs_file, (int)getpid());
    ur_rec_dump(path);
  }
  if (o->log_allocator_stats_on_exit) log_stats();
}
