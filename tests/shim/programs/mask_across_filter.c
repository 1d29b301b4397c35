/* A filter put on every thread (SECCOMP_FILTER_FLAG_TSYNC) by one thread
 * while another is inside libunwind's signal-blocking section: that thread's
 * blocking sigprocmask was made (the process was not filtered yet), and its
 * restoring one must be made too, or the thread keeps every signal blocked.
 *
 * Thread C holds glibc's dl_iterate_phdr lock (inside a callback of its own
 * dl_iterate_phdr); thread B allocates under backtrace=16, its unwinder looks
 * an unwind table up with every signal blocked and waits for that lock
 * there; the main thread sees B's mask full (/proc), then installs the
 * filter (it refuses acct() alone). C lets go once the filter is in or the
 * main thread sleeps waiting for it (/proc/thread-self/syscall's number).
 * B then reports its signal mask. Nothing here allocates between B's start
 * and the end but B: any other thread's unwind would wait for C too.
 * Prints "ok" and exits 0 when B's mask is as before; "BLOCKED <mask>"
 * (exit 1) when not; exit 4 if B's mask never filled (no backtrace option).
 * Thread r lets C go. */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../support/c/seccomp_filter.h"

static int go_b, hold_now, holding, installing, installed, release_c;
static pid_t main_tid, b_tid;
static char b_mask[32];

static void nap(void) {
  struct timespec t = {0, 200000};
  nanosleep(&t, NULL);
}

static void wait_flag(int *flag) {
  while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) nap();
}

/* A /proc file's text into buf, without stdio (which allocates). */
static int read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return 0;
}

/* The SigBlk field of a thread's status, as text. */
static void sig_blocked(pid_t tid, char *out, size_t cap) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
  out[0] = '\0';
  if (read_file(path, buf, sizeof buf) != 0) return;
  const char *f = strstr(buf, "SigBlk:");
  if (!f) return;
  f += strlen("SigBlk:");
  while (*f == ' ' || *f == '\t') f++;
  size_t n = strcspn(f, "\n");
  if (n >= cap) n = cap - 1;
  memcpy(out, f, n);
  out[n] = '\0';
}

/* Whether the main thread sleeps in nanosleep or clock_nanosleep. */
static int main_sleeps(void) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)main_tid);
  if (read_file(path, buf, sizeof buf) != 0) return 0;
  long nr = strtol(buf, NULL, 10);
  return nr == SYS_nanosleep || nr == SYS_clock_nanosleep;
}

static int hold(struct dl_phdr_info *info, size_t size, void *data) {
  (void)info, (void)size, (void)data;
  __atomic_store_n(&holding, 1, __ATOMIC_RELEASE);
  wait_flag(&release_c);
  return 1;
}

static void *holder(void *arg) {
  (void)arg;
  wait_flag(&hold_now); /* every thread made: pthread_create allocates */
  dl_iterate_phdr(hold, NULL);
  return NULL;
}

static void *volatile kept;

/* Called from inside libc's qsort, code no thread has unwound through. */
static int by_value(const void *a, const void *b) {
  if (!kept) kept = malloc(24);
  return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) static void *allocate_here(void) {
  int v[4] = {3, 1, 2, 0};
  qsort(v, 4, sizeof v[0], by_value);
  return kept;
}

static void *unwinder(void *arg) {
  (void)arg;
  __atomic_store_n(&b_tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
  wait_flag(&go_b);
  void *volatile p = allocate_here();
  sig_blocked(b_tid, b_mask, sizeof b_mask);
  free(p);
  return NULL;
}

static void *releaser(void *arg) {
  (void)arg;
  wait_flag(&installing);
  while (!__atomic_load_n(&installed, __ATOMIC_ACQUIRE) && !main_sleeps()) nap();
  __atomic_store_n(&release_c, 1, __ATOMIC_RELEASE);
  return NULL;
}

int main(void) {
  main_tid = (pid_t)syscall(SYS_gettid);
  free(malloc(10));
  char before[32], now[32];
  pthread_t b, c, r;
  if (pthread_create(&b, NULL, unwinder, NULL) || pthread_create(&c, NULL, holder, NULL) ||
      pthread_create(&r, NULL, releaser, NULL))
    return 3;
  __atomic_store_n(&hold_now, 1, __ATOMIC_RELEASE);
  wait_flag(&holding);
  while (!__atomic_load_n(&b_tid, __ATOMIC_ACQUIRE)) nap();
  sig_blocked(b_tid, before, sizeof before);
  __atomic_store_n(&go_b, 1, __ATOMIC_RELEASE);
  for (int waited = 0;; waited++) {
    sig_blocked(b_tid, now, sizeof now);
    if (!now[0]) return 4; /* B is gone: its unwinder never blocked signals */
    if (strcmp(now, before) != 0) break;
    if (waited > 25000) return 4; /* 5 s: its unwinder never blocked signals */
    nap();
  }
  __atomic_store_n(&installing, 1, __ATOMIC_RELEASE);
  if (refuse_call(SYS_acct, SECCOMP_RET_ERRNO | EPERM, FILTER_SYSCALL, SECCOMP_FILTER_FLAG_TSYNC))
    return 2;
  __atomic_store_n(&installed, 1, __ATOMIC_RELEASE);
  pthread_join(b, NULL);
  pthread_join(c, NULL);
  pthread_join(r, NULL);
  if (strcmp(b_mask, before) != 0) {
    printf("BLOCKED %s (before %s)\n", b_mask, before);
    return 1;
  }
  printf("ok\n");
  return 0;
}
