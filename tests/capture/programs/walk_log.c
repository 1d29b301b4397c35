/* LD_PRELOAD into a scanner: every UFFDIO_WRITEPROTECT and UFFDIO_UNREGISTER
 * it makes goes on to the kernel as it was, its range noted first, one
 * "NAME START LEN PAGES" line each, in the file WALK_LOG names. PAGES: the
 * pages (present, swapped or marked) the range holds in process WALK_PID,
 * what the call walks; -1 without it. */
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "unreachable/linux_compat.h"

static int (*real)(int, unsigned long, ...);

static long pages_in(__u64 start, __u64 len) {
  const char *pid = getenv("WALK_PID");
  if (!pid) return -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/pagemap", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct page_region vec[64];
  long pages = 0;
  for (__u64 pos = start; pos < start + len;) {
    struct pm_scan_arg a = {.size = sizeof a, .start = pos, .end = start + len,
                            .vec = (__u64)(unsigned long)vec, .vec_len = 64,
                            .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                            .return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED};
    int n = real(fd, PAGEMAP_SCAN, &a);
    if (n < 0 || a.walk_end <= pos) break;
    for (int i = 0; i < n; i++) pages += (long)((vec[i].end - vec[i].start) >> 12);
    pos = a.walk_end;
  }
  close(fd);
  return pages;
}

static void note(const char *name, __u64 start, __u64 len) {
  const char *path = getenv("WALK_LOG");
  if (!path) return;
  long pages = pages_in(start, len);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  char line[128];
  int n = snprintf(line, sizeof line, "%s %llu %llu %ld\n", name, (unsigned long long)start,
                   (unsigned long long)len, pages);
  if (write(fd, line, (size_t)n) < 0) { /* the scan goes on unnoted */
  }
  close(fd);
}

int ioctl(int fd, unsigned long request, ...) {
  if (!real) real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
  va_list ap;
  va_start(ap, request);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  if (request == UFFDIO_WRITEPROTECT) {
    const struct uffdio_writeprotect *wp = arg;
    note("UFFDIO_WRITEPROTECT", wp->range.start, wp->range.len);
  } else if (request == UFFDIO_UNREGISTER) {
    const struct uffdio_range *r = arg;
    note("UFFDIO_UNREGISTER", r->start, r->len);
  }
  return real(fd, request, arg);
}
