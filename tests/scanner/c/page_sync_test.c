/* page_sync.c against a real process that tracks its own writes as the
 * shim's helper does (an asynchronous userfaultfd): copy while it runs, let
 * it write, unmap and map, stop it, refresh, and compare every page with
 * what the process holds. Built with ASan+UBSan. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "page_sync.h"
#include "unit_test.h"
#include "unreachable/linux_compat.h"


#define PAGES 64
#define PG 4096ul
#define FILLED 60 /* pages 60-63 are never touched before the copy */
#define UNMAPPED 50
#define REMAPPED 55 /* a new mapping: born after tracking began */
#define ABSENT_WRITTEN 61

static const int written[] = {3, 17, 40};

static uint64_t first_value(int page) { return 0x1000u + (uint64_t)page; }
static uint64_t later_value(int page) { return 0xab000u + (uint64_t)page; }

static void child(char *r, int ready_fd, int go_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed check must not leave it behind */
  int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
  if (uffd < 0) uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
  struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC};
  struct uffdio_register reg = {.range = {(uint64_t)(uintptr_t)r, PAGES * PG},
                                .mode = UFFDIO_REGISTER_MODE_WP};
  /* As the shim's helper does: only the present pages are protected. */
  int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  struct page_region vec[PAGES];
  struct pm_scan_arg wp = {.size = sizeof wp,
                           .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                           .start = reg.range.start,
                           .end = reg.range.start + reg.range.len,
                           .vec = (uint64_t)(uintptr_t)vec,
                           .vec_len = PAGES,
                           .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                           .return_mask = PAGE_IS_PRESENT};
  char ok = uffd >= 0 && pm >= 0 && ioctl(uffd, UFFDIO_API, &api) == 0 &&
            ioctl(uffd, UFFDIO_REGISTER, &reg) == 0 && ioctl(pm, PAGEMAP_SCAN, &wp) >= 0 &&
            wp.walk_end == wp.end;
  if (write(ready_fd, &ok, 1) != 1 || !ok) _exit(2);
  char go;
  if (read(go_fd, &go, 1) != 1) _exit(3);
  for (size_t i = 0; i < sizeof written / sizeof *written; i++)
    *(uint64_t *)(r + written[i] * PG) = later_value(written[i]);
  *(uint64_t *)(r + ABSENT_WRITTEN * PG) = later_value(ABSENT_WRITTEN);
  munmap(r + UNMAPPED * PG, PG);
  char *fresh = mmap(r + REMAPPED * PG, PG, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (fresh == MAP_FAILED) _exit(4);
  *(uint64_t *)fresh = later_value(REMAPPED);
  if (write(ready_fd, &go, 1) != 1) _exit(5);
  for (;;) pause();
}

int main(void) {
  /* Placed so that the never-touched pages start a 1 MiB chunk of the copy:
   * that chunk gets no slot until a page of it is written. */
  char *space = mmap(NULL, 4 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK(space != MAP_FAILED);
  uintptr_t chunk = ((uintptr_t)space + (2 << 20)) & ~(uintptr_t)((1 << 20) - 1);
  char *r = mmap((char *)(chunk - FILLED * PG), PAGES * PG, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  CHECK(r != MAP_FAILED);
  for (int p = 0; p < FILLED; p++) *(uint64_t *)(r + p * PG) = first_value(p);
  int up[2], down[2];
  CHECK(pipe(up) == 0 && pipe(down) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) child(r, up[1], down[0]);
  char ok = 0;
  CHECK(read(up[0], &ok, 1) == 1);
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("skip: no asynchronous userfaultfd write protection\n");
    return 0;
  }

  struct ur_pread_mem m;
  CHECK(ur_mem_open(&m, pid, 8 << 20) == 0);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/pagemap", (int)pid);
  int pm = open(path, O_RDONLY | O_CLOEXEC);
  CHECK(pm >= 0);
  uint64_t b = (uint64_t)(uintptr_t)r;

  /* The copy, the process running. */
  struct ur_sync_range whole = {b, b + PAGES * PG, UR_SYNC_ANON};
  struct ur_sync_stats st = {0};
  int rc = ur_sync(&m, pm, &whole, 1, 0, 2, &st);
  if (rc == -ENOTTY || rc == -EINVAL) {
    printf("skip: no PAGEMAP_SCAN\n");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 0;
  }
  CHECK(rc == 0);
  /* Absent pages are zeroed without a read (which would fault them in). */
  CHECK(st.pages_read == FILLED && st.pages_zeroed == PAGES - FILLED && !st.pages_kept);

  /* It writes, unmaps and maps; then it is stopped. */
  char go = 1;
  CHECK(write(down[1], &go, 1) == 1 && read(up[0], &go, 1) == 1);
  CHECK(kill(pid, SIGSTOP) == 0);
  int status;
  CHECK(waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status));

  /* Its maps now: the hole at UNMAPPED is not in the ranges. */
  struct ur_sync_range now[2] = {{b, b + UNMAPPED * PG, UR_SYNC_ANON},
                                 {b + (UNMAPPED + 1) * PG, b + PAGES * PG, UR_SYNC_ANON}};
  memset(&st, 0, sizeof st);
  CHECK(ur_sync(&m, pm, now, 2, 1, 2, &st) == 0);
  ur_sync_finish(&m);
  /* Read again: the three written pages, the absent one written (it
   * appeared unprotected), and the new mapping (untracked); everything else
   * kept, or zeroed if still absent. */
  if (st.pages_read != 5 || st.untracked < 1) {
    fprintf(stderr, "refresh: read %llu untracked %llu kept %llu zeroed %llu\n",
            (unsigned long long)st.pages_read, (unsigned long long)st.untracked,
            (unsigned long long)st.pages_kept, (unsigned long long)st.pages_zeroed);
    return 1;
  }
  CHECK(st.pages_kept + st.pages_read + st.pages_zeroed == PAGES - 1);

  for (int p = 0; p < PAGES; p++) {
    uint64_t v = 0xdead;
    size_t good = ur_mem_read_cached(&m, b + (uint64_t)p * PG, &v, sizeof v);
    uint64_t want = p < FILLED ? first_value(p) : 0;
    for (size_t i = 0; i < sizeof written / sizeof *written; i++)
      if (written[i] == p) want = later_value(p);
    if (p == ABSENT_WRITTEN || p == REMAPPED) want = later_value(p);
    if (p == UNMAPPED) {
      CHECK(good == 0 && v == 0); /* gone: unreadable, not its old contents */
      continue;
    }
    if (good != sizeof v || v != want) {
      fprintf(stderr, "page %d: read %zu bytes, %#llx, want %#llx\n", p, good,
              (unsigned long long)v, (unsigned long long)want);
      return 1;
    }
  }
  close(pm);
  ur_mem_close(&m);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  printf("ok page_sync\n");
  return 0;
}
