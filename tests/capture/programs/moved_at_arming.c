/* A pointer moved into a block allocated after the first stop, right after
 * it: a thread watches one page it never writes; when the page's uffd-wp bit
 * (pagemap bit 57) appears (the scanner armed its write tracking) it spins
 * until its clock jumps (the stop that follows), then puts the only pointer to an old block into a new block, the new block in
 * a global, and clears the old holder. The first mark knows nothing of the
 * new block (not in the first stop's registry), so the old block stays
 * reachable only through the pages written since the arming: a mark that
 * loses those writes reports it. No block leaks. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "../../scan/programs/scenario.h"

static char watched[4096] __attribute__((aligned(4096)));
static void **holder;          /* an old block holding the old block */
static void **volatile newest; /* the new block holding it after a move */

static int armed(int fd) {
  uint64_t entry = 0;
  off_t at = (off_t)((uintptr_t)watched / 4096 * sizeof entry);
  if (pread(fd, &entry, sizeof entry, at) != (ssize_t)sizeof entry) return 0;
  return (int)((entry >> 57) & 1);
}

__attribute__((noinline)) static void move_once(void) {
  void **n = malloc(64);
  if (!n) return;
  memset(n, 0, 64);
  void **before = newest;
  void *a = before ? before[0] : holder[0];
  n[0] = a;
  newest = n;
  if (before) {
    before[0] = NULL;
    free(before);
  } else {
    holder[0] = NULL;
  }
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Until the clock jumps by 300 us between two readings (a stop), or 2 s. */
static void wait_for_stop(void) {
  int64_t start = now_ns(), last = start;
  for (;;) {
    int64_t t = now_ns();
    if (t - last > 300000 || t - start > 2000000000) return;
    last = t;
  }
}

static void *watch(void *arg) {
  int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return arg;
  int was = 0;
  for (;;) {
    int now = armed(fd);
    if (now && !was) {
      wait_for_stop();
      move_once();
      wipe(); /* no copy of the old block's address left on this stack */
    }
    was = now;
    /* no sleep: the first stop follows the arming within milliseconds */
  }
}

int main(void) {
  watched[0] = 1; /* a page table entry for the kernel to protect */
  holder = calloc(8, sizeof(void *));
  if (!holder) return 1;
  holder[0] = malloc(3000);
  pthread_t t;
  pthread_create(&t, NULL, watch, NULL);
  wipe();
  ready("leak_count=0 leak_bytes=0");
  wait_for_test();
  return 0;
}
