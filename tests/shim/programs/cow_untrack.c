/* The helper ending a copy-on-write snapshot by itself (write_tracking.c,
 * stop_tracking) while the scanner still holds the userfaultfd and serves
 * no fault, as a stopped scanner does: every thread blocked in a
 * write-protect fault must go on. The kernel's UFFDIO_UNREGISTER wakes the
 * range's waiters before it clears the protection, and a thread faulting
 * under the per-VMA lock in between queues itself after that wake: with
 * the helper's walk in 8 MiB pieces and writers all over the range, some
 * round loses one. Prints "OK" or what was left waiting. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "write_tracking.h"

#define SIZE ((size_t)128 << 20)
#define WRITERS 4
#define ROUNDS 100

static char *mem;
static volatile uint64_t counts[WRITERS];

static void *writer(void *arg) {
  size_t id = (size_t)arg;
  uint64_t x = id * 2654435761u + 1;
  for (;;) {
    x = x * 6364136223846793005u + 1442695040888963407u;
    memset(mem + ((x >> 20) % (SIZE / 1024)) * 1024, (int)id, 1024);
    __atomic_add_fetch(&counts[id], 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

/* The helper's descriptor, as the scanner takes it (pidfd_getfd): a copy. */
static int held_uffd(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int found = -1;
  while (d && (e = readdir(d)) != NULL) {
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n > 0 && (link[n] = '\0', strcmp(link, "anon_inode:[userfaultfd]") == 0))
      found = atoi(e->d_name);
  }
  if (d) closedir(d);
  return found < 0 ? -1 : dup(found);
}

/* Threads queued on the descriptor's faults ("total:" in its fdinfo). */
static long waiting(int fd) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  int f = open(path, O_RDONLY);
  ssize_t n = f < 0 ? -1 : read(f, buf, sizeof buf - 1);
  if (f >= 0) close(f);
  buf[n > 0 ? n : 0] = '\0';
  char *t = strstr(buf, "total:");
  return t ? strtol(t + 6, NULL, 10) : -1;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(void) {
  mem = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return perror("mmap"), 2;
  memset(mem, 1, SIZE);
  pthread_t t[WRITERS];
  for (size_t i = 0; i < WRITERS; i++) pthread_create(&t[i], NULL, writer, (void *)i);
  for (int round = 0; round < ROUNDS; round++) {
    ur_write_tracker.reserved = UR_TRACK_MODE_COW;
    ur_write_tracker.scanner_pid = (uint32_t)getpid();
    ur_write_tracker.cmd = UR_TRACK_START;
    ur_write_tracking_begin();
    int fd = held_uffd();
    if (ur_write_tracker.cmd != UR_TRACK_ON || fd < 0) {
      printf("no copy-on-write tracking: cmd %u error %u\n", ur_write_tracker.cmd,
             ur_write_tracker.error);
      return 2;
    }
    /* What the scanner's snapshot does (cow.c), then it serves nothing. */
    struct uffdio_register reg = {
        .range = {(uintptr_t)mem, SIZE},
        .mode = UFFDIO_REGISTER_MODE_WP | UFFDIO_REGISTER_MODE_MISSING};
    struct uffdio_writeprotect wp = {.range = {(uintptr_t)mem, SIZE},
                                     .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0 || ioctl(fd, UFFDIO_WRITEPROTECT, &wp) != 0)
      return perror("protect"), 2;
    uint64_t deadline = now_ns() + 10ull * 1000000000u;
    while (waiting(fd) < WRITERS) {
      if (now_ns() > deadline) return printf("the writers never blocked\n"), 2;
    }
    ur_write_tracker.cmd = UR_TRACK_STOP;
    ur_write_tracking_check(); /* the helper's walk, the scanner's copy still open */
    long left = waiting(fd);
    uint64_t before[WRITERS];
    for (int i = 0; i < WRITERS; i++) before[i] = counts[i];
    int stuck = 0;
    deadline = now_ns() + 10ull * 1000000000u;
    for (int i = 0; i < WRITERS; i++)
      while (counts[i] == before[i] && !(stuck = now_ns() > deadline)) {
      }
    if (left != 0 || stuck || ur_write_tracker.cmd != UR_TRACK_IDLE) {
      printf("round %d: %ld threads left waiting on the snapshot's faults\n", round, left);
      return 1;
    }
    close(fd);
  }
  printf("OK\n");
  return 0;
}
