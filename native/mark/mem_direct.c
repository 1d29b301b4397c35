#include "mem_direct.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "alloc.h"
#include "radix_sort.h"
#include "raw_syscall.h"
#include "unreachable/linux_compat.h"

#define BAD_SLOTS 4096u
#define MAPS_BUF ((size_t)64 << 10) /* /proc/self/maps read this much at a time */
#define ANON_START 4096u            /* private anonymous ranges room at first */

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

static uint64_t parse_hex(const char **s, const char *end) {
  uint64_t v = 0;
  for (; *s < end; (*s)++) {
    char c = **s;
    unsigned digit;
    if (c >= '0' && c <= '9') digit = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') digit = (unsigned)(c - 'a' + 10);
    else break;
    v = v << 4 | digit;
  }
  return v;
}

static int named(const char *s, size_t len, const char *name, int prefix) {
  size_t n = strlen(name);
  return (prefix ? len >= n : len == n) && memcmp(s, name, n) == 0;
}

/* One line of /proc/self/maps, [s, end): 1 with its range when it is
 * private anonymous memory (no file, no device: the heap, a stack, an
 * anonymous or named anonymous mapping), else 0. Shared anonymous memory
 * and hugetlbfs show a file and are left out. */
static int anon_line(const char *s, const char *end, uint64_t *b, uint64_t *e) {
  *b = parse_hex(&s, end);
  if (s == end || *s++ != '-') return 0;
  *e = parse_hex(&s, end);
  if (end - s < 6 || s[0] != ' ' || s[4] != 'p' || s[5] != ' ') return 0;
  s += 6;
  parse_hex(&s, end); /* offset */
  if (s == end || *s++ != ' ') return 0;
  uint64_t major = parse_hex(&s, end);
  if (s == end || *s++ != ':') return 0;
  uint64_t minor = parse_hex(&s, end);
  if (s == end || *s++ != ' ') return 0;
  uint64_t inode = 0;
  while (s < end && *s >= '0' && *s <= '9') inode = inode * 10 + (uint64_t)(*s++ - '0');
  if (major || minor || inode) return 0;
  while (s < end && *s == ' ') s++;
  size_t len = (size_t)(end - s);
  return len == 0 || named(s, len, "[heap]", 0) || named(s, len, "[stack]", 0) ||
         named(s, len, "[anon:", 1);
}

static int add_anon(struct ur_direct_mem *d, size_t *cap, uint64_t b, uint64_t e) {
  if (d->nanon && b < d->anon[2 * d->nanon - 1]) return -EINVAL; /* not in order */
  if (d->nanon && b == d->anon[2 * d->nanon - 1]) {
    d->anon[2 * d->nanon - 1] = e;
    return 0;
  }
  if (d->nanon == *cap) {
    uint64_t *grown = ur_big_realloc(d->anon, 4 * *cap * sizeof(*grown));
    if (!grown) return -ENOMEM;
    d->anon = grown;
    *cap *= 2;
  }
  d->anon[2 * d->nanon] = b;
  d->anon[2 * d->nanon + 1] = e;
  d->nanon++;
  return 0;
}

/* The private anonymous ranges, from /proc/self/maps. 0, or -1 (then the
 * caller skips nothing). */
static int load_anon(struct ur_direct_mem *d) {
  long fd = ur_sys4(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
  if (ur_sys_failed(fd)) return -1;
  size_t cap = ANON_START, have = 0;
  char *buf = ur_big_calloc(MAPS_BUF, 1);
  d->anon = ur_big_calloc(2 * cap, sizeof(*d->anon));
  int rc = -1;
  if (!buf || !d->anon) goto out;
  for (;;) {
    long got;
    do {
      got = ur_sys3(SYS_read, fd, buf + have, MAPS_BUF - have);
    } while (got == -EINTR);
    if (ur_sys_failed(got)) goto out;
    have += (size_t)got;
    size_t start = 0;
    for (size_t i = 0; i < have; i++) {
      if (buf[i] != '\n') continue;
      uint64_t b, e;
      if (anon_line(buf + start, buf + i, &b, &e) && e > b && add_anon(d, &cap, b, e) < 0)
        goto out;
      start = i + 1;
    }
    if (got == 0) break; /* every line of the file ends in a newline */
    memmove(buf, buf + start, have - start);
    have -= start;
    if (have == MAPS_BUF) goto out; /* a line longer than the buffer */
  }
  rc = 0;
out:
  ur_sys1(SYS_close, fd);
  ur_big_free(buf);
  if (rc) {
    ur_big_free(d->anon);
    d->anon = NULL;
    d->nanon = 0;
  }
  return rc;
}

/* mem.present: within one private anonymous range, the pages that exist
 * (present, or swapped out) by PAGEMAP_SCAN (Linux 6.7); elsewhere (a file
 * mapping's absent page holds the file, a shared one's the shared memory)
 * or without the ioctl, not known. */
static int direct_present(struct ur_mem *m, uint64_t addr, uint64_t end, uint64_t *out, int cap,
                          uint64_t *done) {
  struct ur_direct_mem *d = (struct ur_direct_mem *)m;
  if (!d->anon_state) d->anon_state = load_anon(d) == 0 ? 1 : -1;
  if (d->anon_state < 0 || d->pagemap_fd == -2 || end <= addr || cap < 1) return -1;
  size_t lo = 0, hi = d->nanon;
  while (lo < hi) { /* first range with begin > addr */
    size_t mid = lo + (hi - lo) / 2;
    if (d->anon[2 * mid] <= addr) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0 || end > d->anon[2 * (lo - 1) + 1]) return -1;
  if (d->pagemap_fd == -1) {
    long fd = ur_sys4(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
    d->pagemap_fd = ur_sys_failed(fd) ? -2 : (int)fd;
    if (d->pagemap_fd < 0) return -1;
  }
  struct page_region vec[UR_SPARSE_PARTS];
  struct pm_scan_arg a = {
      .size = sizeof(a),
      .start = addr & ~(UR_PAGE_SIZE - 1),
      .end = end,
      .vec = (uint64_t)(uintptr_t)vec,
      .vec_len = (uint64_t)(cap < (int)UR_SPARSE_PARTS ? cap : (int)UR_SPARSE_PARTS),
      .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
      .return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
  };
  long got;
  do {
    got = ur_sys3(SYS_ioctl, d->pagemap_fd, PAGEMAP_SCAN, &a);
  } while (got == -EINTR);
  if (ur_sys_failed(got)) {
    if (got == -ENOTTY || got == -EINVAL) d->pagemap_fd = -2; /* no such ioctl here */
    return -1;
  }
  int k = 0;
  for (long i = 0; i < got; i++) {
    uint64_t b = vec[i].start < addr ? addr : vec[i].start;
    uint64_t e = vec[i].end > end ? end : vec[i].end;
    if (e <= b) continue;
    out[2 * k] = b;
    out[2 * k + 1] = e;
    k++;
  }
  uint64_t walked = a.walk_end < end ? a.walk_end : end;
  if (walked <= addr) return -1; /* no progress */
  *done = walked;
  return k;
}

int ur_direct_open(struct ur_direct_mem *d, const uint64_t *ranges, size_t n) {
  memset(d, 0, sizeof(*d));
  d->fd = -1;
  d->pagemap_fd = -1;
  d->mem.slow = direct_slow;
  d->mem.present = direct_present;
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
  ur_big_free(d->anon);
  if (d->fd >= 0) ur_sys1(SYS_close, d->fd);
  if (d->pagemap_fd >= 0) ur_sys1(SYS_close, d->pagemap_fd);
  memset(d, 0, sizeof(*d));
  d->fd = -1;
  d->pagemap_fd = -1;
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
