#include "mem_direct.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "alloc.h"
#include "radix_sort.h"
#include "raw_syscall.h"

#define BAD_SLOTS 4096u

/* Index of the range containing addr, or -1. */
static ptrdiff_t find_range(const struct ur_direct_mem *d, uint64_t addr) {
  size_t lo = 0, hi = d->nranges;
  while (lo < hi) { /* first range with begin > addr */
    size_t mid = lo + (hi - lo) / 2;
    if (d->ranges[2 * mid] <= addr) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0 || addr >= d->ranges[2 * (lo - 1) + 1]) return -1;
  return (ptrdiff_t)(lo - 1);
}

int ur_direct_readable(const struct ur_direct_mem *d, uint64_t addr) {
  return find_range(d, addr) >= 0;
}

/* Count page once; the set saturates (then counts may repeat) rather than fail. */
static void count_bad(struct ur_direct_mem *d, uint64_t page) {
  uint64_t key = page + 1;
  size_t i = (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 40) & d->bad_mask;
  if (d->bad_n * 2 < d->bad_mask) {
    while (d->bad[i]) {
      if (d->bad[i] == key) return;
      i = (i + 1) & d->bad_mask;
    }
    d->bad[i] = key;
    d->bad_n++;
  }
  d->mem.pages_skipped++;
}

static const uint8_t *direct_slow(struct ur_mem *m, uint64_t addr, uint64_t end,
                                  uint64_t *avail) {
  struct ur_direct_mem *d = (struct ur_direct_mem *)m;
  ptrdiff_t r = find_range(d, addr);
  if (r >= 0) {
    m->win_lo = d->ranges[2 * r];
    m->win_hi = d->ranges[2 * r + 1];
    m->win_delta = 0;
    return ur_mem_view(m, addr, end, avail);
  }
  /* Not listed: one page through /proc/self/mem, up to the next listed range. */
  uint64_t page = addr & ~(UR_PAGE_SIZE - 1);
  uint8_t *buf = d->ring + (size_t)d->ring_next * UR_PAGE_SIZE;
  d->ring_next = (d->ring_next + 1) % UR_DIRECT_RING;
  if (d->fd == -1) {
    long fd = ur_sys4(SYS_openat, AT_FDCWD, "/proc/self/mem", O_RDONLY | O_CLOEXEC, 0);
    d->fd = ur_sys_failed(fd) ? -2 : (int)fd; /* -2: tried, no second try */
  }
  long got = -1;
  if (d->fd >= 0 && page < (UINT64_C(1) << 63)) {
    do {
      got = ur_sys4(SYS_pread64, d->fd, buf, UR_PAGE_SIZE, page);
    } while (got == -EINTR);
  }
  d->bounced++;
  if (got != (long)UR_PAGE_SIZE) {
    memset(buf, 0, UR_PAGE_SIZE);
    count_bad(d, page >> UR_PAGE_SHIFT);
  }
  uint64_t n = page + UR_PAGE_SIZE - addr;
  if (end > addr && end - addr < n) n = end - addr;
  *avail = n;
  return buf + (addr - page);
}

int ur_direct_open(struct ur_direct_mem *d, const uint64_t *ranges, size_t n) {
  memset(d, 0, sizeof(*d));
  d->fd = -1;
  d->mem.slow = direct_slow;
  d->mem.room = UR_DIRECT_RING - 1;
  d->ranges = ur_big_calloc(2 * (n ? n : 1), sizeof(*d->ranges));
  d->ring = ur_big_calloc(UR_DIRECT_RING, UR_PAGE_SIZE);
  d->bad = ur_big_calloc(BAD_SLOTS, sizeof(*d->bad));
  uint64_t *keys = ur_big_calloc(n ? n : 1, sizeof(*keys));
  uint32_t *order = ur_big_calloc(n ? n : 1, sizeof(*order));
  int rc = -ENOMEM;
  if (!d->ranges || !d->ring || !d->bad || !keys || !order) goto out;
  d->bad_mask = BAD_SLOTS - 1;
  for (size_t i = 0; i < n; i++) {
    keys[i] = ranges[2 * i];
    order[i] = (uint32_t)i;
  }
  if (ur_radix_sort(keys, order, n) < 0) goto out;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t b = keys[i], e = ranges[2 * order[i] + 1];
    if (e <= b) continue;
    if (k && b <= d->ranges[2 * k - 1]) { /* overlaps or touches the previous one */
      if (e > d->ranges[2 * k - 1]) d->ranges[2 * k - 1] = e;
      continue;
    }
    d->ranges[2 * k] = b;
    d->ranges[2 * k + 1] = e;
    k++;
  }
  d->nranges = k;
  rc = 0;
out:
  ur_big_free(keys);
  ur_big_free(order);
  if (rc) ur_direct_close(d);
  return rc;
}

void ur_direct_close(struct ur_direct_mem *d) {
  ur_big_free(d->ranges);
  ur_big_free(d->ring);
  ur_big_free(d->bad);
  if (d->fd >= 0) ur_sys1(SYS_close, d->fd);
  memset(d, 0, sizeof(*d));
  d->fd = -1;
}

static struct ur_direct_mem *fault_mem;

static void on_fault(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  struct ur_direct_mem *d = fault_mem;
  uint64_t a = (uint64_t)(uintptr_t)si->si_addr;
  if (d && ur_direct_readable(d, a)) {
    long r = ur_sys6(SYS_mmap, (long)(a & ~(UR_PAGE_SIZE - 1)), (long)UR_PAGE_SIZE, PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (!ur_sys_failed(r)) {
      d->mem.pages_skipped++;
      return; /* the load is retried and reads zero */
    }
  }
  /* Not a load of ours: die of it. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, NULL);
}

void ur_direct_catch_faults(struct ur_direct_mem *d) {
  fault_mem = d;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigfillset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  uint64_t faults = (UINT64_C(1) << (SIGSEGV - 1)) | (UINT64_C(1) << (SIGBUS - 1));
  ur_sys4(SYS_rt_sigprocmask, SIG_UNBLOCK, &faults, NULL, sizeof(faults));
}
