#include "cow.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "memory.h"
#include "unreachable/linux_compat.h"
#include "unreachable/write_protect.h"

#define PAGE 4096u
#define SLAB (2u << 20)

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t slot(uint64_t page, size_t mask) {
  return (size_t)(((page >> 12) * UINT64_C(0x9E3779B97F4A7C15)) >> 20) & mask;
}

static uint8_t *lookup(struct ur_cow *c, uint64_t page) {
  if (!c->cap) return NULL;
  for (size_t i = slot(page, c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
    if (!c->keys[i]) return NULL;
    if (c->keys[i] == page + 1) return c->vals[i];
  }
}

static int grow(struct ur_cow *c) {
  size_t cap = c->cap ? c->cap * 2 : 4096;
  uint64_t *keys = calloc(cap, sizeof(*keys));
  uint8_t **vals = calloc(cap, sizeof(*vals));
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return -ENOMEM;
  }
  for (size_t i = 0; i < c->cap; i++) {
    if (!c->keys[i]) continue;
    size_t j = slot(c->keys[i] - 1, cap - 1);
    while (keys[j]) j = (j + 1) & (cap - 1);
    keys[j] = c->keys[i];
    vals[j] = c->vals[i];
  }
  free(c->keys);
  free(c->vals);
  c->keys = keys;
  c->vals = vals;
  c->cap = cap;
  return 0;
}

/* Room for at least a page in the current slab (a new slab if not). 0, or
 * -1 when the snapshot's limit is reached. */
static int slab_room(struct ur_cow *c) {
  if (c->slab_left >= PAGE) return 0;
  if (c->held + SLAB > c->limit) return -1;
  void **s = realloc(c->slabs, (c->nslabs + 1) * sizeof(*s));
  if (!s) return -1;
  c->slabs = s;
  void *m = mmap(NULL, SLAB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -1;
  c->slabs[c->nslabs++] = m;
  c->slab = m;
  c->slab_left = SLAB;
  c->held += SLAB;
  return 0;
}

/* The next len bytes of the slab (slab_room first; len <= slab_left). */
static uint8_t *slab_take(struct ur_cow *c, uint64_t len) {
  uint8_t *p = c->slab;
  c->slab += len;
  c->slab_left -= len;
  return p;
}

static void unprotect(struct ur_cow *c, uint64_t begin, uint64_t len) {
  struct uffdio_writeprotect wp = {.range = {begin, len}, .mode = 0};
  if (ioctl(c->uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
    struct uffdio_range r = {begin, len};
    ioctl(c->uffd, UFFDIO_WAKE, &r);
  }
}

/* Whatever can no longer be saved: nothing stays protected, the snapshot
 * is marked failed (its reader then refuses it). */
static void give_up(struct ur_cow *c) {
  __atomic_store_n(&c->failed, 1, __ATOMIC_RELEASE);
  for (size_t i = 0; i < c->nranges; i++)
    unprotect(c, c->ranges[2 * i], c->ranges[2 * i + 1] - c->ranges[2 * i]);
}

static int saved_already(struct ur_cow *c, uint64_t page) {
  pthread_mutex_lock(&c->lock);
  int have = lookup(c, page) != NULL;
  pthread_mutex_unlock(&c->lock);
  return have;
}

/* Enter the saved pages [page, page + len) held at buf. 0, or -1 when no room. */
static int enter(struct ur_cow *c, uint64_t page, uint8_t *buf, uint64_t len) {
  pthread_mutex_lock(&c->lock);
  for (uint64_t off = 0; off < len; off += PAGE) {
    if ((c->n + 1) * 2 > c->cap && grow(c) < 0) {
      pthread_mutex_unlock(&c->lock);
      return -1;
    }
    size_t i = slot(page + off, c->cap - 1);
    while (c->keys[i]) i = (i + 1) & (c->cap - 1);
    c->vals[i] = buf + off;
    c->keys[i] = page + off + 1;
    __atomic_store_n(&c->n, c->n + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&c->lock);
  return 0;
}

/* Read [page, page + len) into buf, what a page cannot give as zeros: one
 * read for the run, then page by page from the first page it fell short
 * in, so that an unreadable page costs only itself. Returns the reads. */
static unsigned read_pages(struct ur_cow *c, uint64_t page, uint8_t *buf, uint64_t len) {
  unsigned reads = 1;
  ssize_t r = pread(c->memfd, buf, len, (off_t)page);
  uint64_t off = r > 0 ? (uint64_t)r & ~(uint64_t)(PAGE - 1) : 0;
  for (; off < len; off += PAGE, reads++) {
    r = pread(c->memfd, buf + off, PAGE, (off_t)(page + off));
    if (r < (ssize_t)PAGE) memset(buf + off + (r > 0 ? r : 0), 0, PAGE - (size_t)(r > 0 ? r : 0));
  }
  return reads;
}

/* The page's bytes now, saved unless saved already. 0, or -1 when no room. */
static int keep(struct ur_cow *c, uint64_t page) {
  if (saved_already(c, page)) return 0;
  if (slab_room(c) < 0) return -1;
  uint8_t *buf = slab_take(c, PAGE);
  read_pages(c, page, buf, PAGE);
  return enter(c, page, buf, PAGE);
}

/* The pages of the pairs not saved yet, a run of them at a time: one read
 * per run that fits the slab (a read per page took ~150 reads of the
 * shim's own memory and the helper's stack inside the pause). */
int ur_cow_save(struct ur_cow *c, const uint64_t *pairs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    for (uint64_t p = pairs[2 * i], e = pairs[2 * i + 1], q; p < e; p = q) {
      q = p + PAGE;
      if (saved_already(c, p)) continue;
      if (slab_room(c) < 0) return -ENOMEM;
      while (q < e && q - p < c->slab_left && !saved_already(c, q)) q += PAGE;
      uint8_t *buf = slab_take(c, q - p);
      c->save_reads += read_pages(c, p, buf, q - p);
      if (enter(c, p, buf, q - p) < 0) return -ENOMEM;
    }
  }
  return 0;
}

static int add_pair(uint64_t **v, size_t *n, size_t *cap, uint64_t b, uint64_t e);

/* Whether the page was written between the protection and the seal (the
 * seal sorted them; read only after it). */
static int was_dirty(const struct ur_cow *c, uint64_t page) {
  size_t lo = 0, hi = c->ndirty;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c->dirty[2 * mid] < page)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < c->ndirty && c->dirty[2 * lo] == page;
}

static void save(struct ur_cow *c, uint64_t page) {
  if (!__atomic_load_n(&c->sealed, __ATOMIC_ACQUIRE)) {
    /* Before the snapshot: unprotected under the lock, so that the seal
     * (which takes it) protects again every page unprotected here. */
    pthread_mutex_lock(&c->lock);
    if (!c->sealed) {
      int rc = add_pair(&c->dirty, &c->ndirty, &c->dirty_cap, page, page + PAGE);
      if (rc < 0) __atomic_store_n(&c->failed, 1, __ATOMIC_RELEASE);
      unprotect(c, page, PAGE);
      pthread_mutex_unlock(&c->lock);
      return;
    }
    pthread_mutex_unlock(&c->lock);
  }
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE)) {
    unprotect(c, page, PAGE);
    return;
  }
  if (keep(c, page) < 0) {
    give_up(c);
    return;
  }
  c->faults++;
  if (was_dirty(c, page)) c->dirty_faults++;
  unprotect(c, page, PAGE);
}

/* The runs of pages noted while the target ran, sorted and merged once
 * they are first looked up (after the seal, outside the pause). Under the
 * lock. */
static void sort_present(struct ur_cow *c) {
  if (c->present_sorted) return;
  c->present_sorted = 1;
  qsort(c->present, c->npresent, 2 * sizeof(uint64_t), ur_by_first_u64);
  size_t k = 0;
  for (size_t i = 0; i < c->npresent; i++) {
    uint64_t *last = k ? &c->present[2 * k - 1] : NULL;
    if (last && c->present[2 * i] <= *last) {
      if (c->present[2 * i + 1] > *last) *last = c->present[2 * i + 1];
      continue;
    }
    c->present[2 * k] = c->present[2 * i];
    c->present[2 * k + 1] = c->present[2 * i + 1];
    k++;
  }
  c->npresent = k;
}

/* Whether the page held memory at the seal (the rest was zero in the
 * snapshot, and a first touch since is saved as zero: missing()). Under
 * the lock. */
static int was_present(struct ur_cow *c, uint64_t page) {
  if (!c->present_known) return 1;
  sort_present(c);
  size_t lo = 0, hi = c->npresent;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c->present[2 * mid + 1] <= page)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < c->npresent && c->present[2 * lo] <= page;
}

/* Memory the target released (munmap, MADV_DONTNEED, mremap's source)
 * after the seal: its pages that held memory then and were not saved are
 * lost to the snapshot. The event has let the target go on as it was
 * read, so they cannot be saved now. They are kept as runs: whether the
 * scan needed them (a root, a block) is known only once it has run. */
static void released(struct ur_cow *c, uint64_t begin, uint64_t end) {
  if (!__atomic_load_n(&c->sealed, __ATOMIC_ACQUIRE)) return;
  uint64_t lost = 0;
  pthread_mutex_lock(&c->lock);
  for (size_t i = 0; i < c->nranges; i++) {
    uint64_t b = c->ranges[2 * i] > begin ? c->ranges[2 * i] : begin;
    uint64_t e = c->ranges[2 * i + 1] < end ? c->ranges[2 * i + 1] : end;
    for (uint64_t p = b & ~(uint64_t)(PAGE - 1); p < e; p += PAGE) {
      if (lookup(c, p) || !was_present(c, p)) continue;
      lost += PAGE;
      size_t k = c->nlost;
      if (k && c->lost_runs[2 * k - 1] == p)
        c->lost_runs[2 * k - 1] = p + PAGE;
      else if (add_pair(&c->lost_runs, &c->nlost, &c->lost_cap, p, p + PAGE) < 0)
        c->present_known = 0; /* unrecorded: counted, and the scan redone */
    }
  }
  if (!c->present_known) c->lost_unrecorded = 1;
  pthread_mutex_unlock(&c->lock);
  __atomic_fetch_add(&c->lost, lost, __ATOMIC_RELEASE);
}

/* A run of pages there at the seal. Under the lock, or before any fault
 * can come (the protection). Unrecorded: every page counts as present. */
static void note_run(struct ur_cow *c, uint64_t b, uint64_t e) {
  if (!c->present_known) return;
  size_t k = c->npresent;
  if (k && c->present[2 * k - 1] == b) {
    c->present[2 * k - 1] = e;
  } else {
    if (k && c->present[2 * k - 2] > b) c->present_sorted = 0;
    if (add_pair(&c->present, &c->npresent, &c->present_cap, b, e) < 0) c->present_known = 0;
  }
}

/* The runs of pages of [lo, hi) now, by PAGEMAP_SCAN in pieces (the walk
 * holds the target's mmap lock for reading: ur_pages_ahead). Pages that
 * appear afterwards fault first (the range is registered for missing
 * pages): missing() notes those. The target runs: this costs no pause. */
static void walk_present(struct ur_cow *c, uint64_t lo, uint64_t hi) {
  struct page_region vec[64];
  for (uint64_t pos = lo; pos < hi && c->present_known;) {
    uint64_t walk_end = hi;
    int n = ur_pages_ahead(c->pagemap, pos, hi, vec, 64, &walk_end);
    pthread_mutex_lock(&c->lock);
    if (n < 0) c->present_known = 0;
    for (int i = 0; i < n; i++) note_run(c, vec[i].start, vec[i].end);
    pthread_mutex_unlock(&c->lock);
    if (n == 64) walk_end = vec[63].end; /* the vector was full: go on after it */
    pos = walk_end;
  }
}

static const uint8_t zero_page[PAGE] __attribute__((aligned(PAGE)));

/* A first touch of a page the target does not have (registered for missing
 * pages: write protection alone leaves absent pages unprotected, and
 * marking them would build page tables for all of a sparse reservation).
 * After the seal it was absent at the snapshot: saved as zero first. A read
 * (the target's, or the scanner's own through /proc/PID/mem) gets the
 * shared zero page, no memory; before the seal that page is noted dirty,
 * to be protected with the others. A write gets a page of its own,
 * protected before the seal, as the pages the target had. */
static void missing(struct ur_cow *c, uint64_t page, int write) {
  pthread_mutex_lock(&c->lock);
  int sealed = c->sealed, ok = 1;
  if (sealed && !lookup(c, page)) {
    ok = (c->n + 1) * 2 <= c->cap || grow(c) == 0;
    if (ok) {
      size_t i = slot(page, c->cap - 1);
      while (c->keys[i]) i = (i + 1) & (c->cap - 1);
      c->vals[i] = (uint8_t *)zero_page;
      c->keys[i] = page + 1;
      __atomic_store_n(&c->n, c->n + 1, __ATOMIC_RELEASE);
    }
  } else if (!sealed) {
    /* A page that appears before the seal was there at it: the walk of
     * present pages (ur_cow_protect) ran before, or misses it. */
    note_run(c, page, page + PAGE);
    if (!write) ok = add_pair(&c->dirty, &c->ndirty, &c->dirty_cap, page, page + PAGE) == 0;
  }
  if (!ok) __atomic_store_n(&c->failed, 1, __ATOMIC_RELEASE);
  int rc;
  if (write) {
    struct uffdio_copy cp = {.dst = page,
                             .src = (uint64_t)(uintptr_t)zero_page,
                             .len = PAGE,
                             .mode = sealed ? 0 : UFFDIO_COPY_MODE_WP};
    rc = ioctl(c->uffd, UFFDIO_COPY, &cp);
  } else {
    struct uffdio_zeropage zp = {.range = {page, PAGE}, .mode = 0};
    rc = ioctl(c->uffd, UFFDIO_ZEROPAGE, &zp);
  }
  /* Under the lock before the seal: the seal protects what is noted. */
  pthread_mutex_unlock(&c->lock);
  if (rc != 0) {
    struct uffdio_range r = {page, PAGE}; /* filled meanwhile (EEXIST): wake */
    ioctl(c->uffd, UFFDIO_WAKE, &r);
  }
}

static void *serve(void *arg) {
  struct ur_cow *c = arg;
  struct uffd_msg msgs[64];
  /* A writer of the target waits until this thread runs: where the scanner
   * may (as its tracer in a stop), it runs before the scan's own threads.
   * It only ever blocks in poll or does a page's work. */
  struct sched_param rt = {.sched_priority = 1};
  pthread_setschedparam(pthread_self(), SCHED_FIFO, &rt);
  for (;;) {
    struct pollfd p[2] = {{.fd = c->uffd, .events = POLLIN}, {.fd = c->wake[0], .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    ssize_t r = read(c->uffd, msgs, sizeof msgs);
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      break;
    }
    for (size_t i = 0; i < (size_t)r / sizeof msgs[0]; i++) {
      const struct uffd_msg *m = &msgs[i];
      if (m->event == UFFD_EVENT_PAGEFAULT && (m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP))
        save(c, m->arg.pagefault.address & ~(uint64_t)(PAGE - 1));
      else if (m->event == UFFD_EVENT_PAGEFAULT)
        missing(c, m->arg.pagefault.address & ~(uint64_t)(PAGE - 1),
                (m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE) != 0);
      else if (m->event == UFFD_EVENT_REMOVE || m->event == UFFD_EVENT_UNMAP)
        released(c, m->arg.remove.start, m->arg.remove.end);
      else if (m->event == UFFD_EVENT_REMAP)
        released(c, m->arg.remap.from, m->arg.remap.from + m->arg.remap.len);
    }
  }
  return NULL;
}

int ur_cow_open(struct ur_cow *c, pid_t pid, int uffd, uint64_t limit) {
  memset(c, 0, sizeof(*c));
  c->pid = pid;
  c->uffd = uffd;
  c->limit = limit;
  c->wake[0] = c->wake[1] = -1;
  c->present_sorted = 1;
  pthread_mutex_init(&c->lock, NULL);
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
  c->pagemap = open(path, O_RDONLY | O_CLOEXEC);
  c->present_known = c->pagemap >= 0;
  snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
  if ((c->memfd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || pipe2(c->wake, O_CLOEXEC) < 0) {
    int e = errno;
    ur_cow_close(c);
    return -e;
  }
  if (pthread_create(&c->server, NULL, serve, c) != 0) {
    ur_cow_close(c);
    return -EAGAIN;
  }
  c->serving = 1;
  return 0;
}

static int add_pair(uint64_t **v, size_t *n, size_t *cap, uint64_t b, uint64_t e) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 64;
    uint64_t *r = realloc(*v, nc * 2 * sizeof(*r));
    if (!r) return -ENOMEM;
    *v = r;
    *cap = nc;
  }
  (*v)[2 * *n] = b;
  (*v)[2 * *n + 1] = e;
  (*n)++;
  return 0;
}

size_t ur_cow_register(struct ur_cow *c, const uint64_t *pairs, size_t n) {
  size_t done = 0;
  for (size_t i = 0; i < n; i++) {
    struct uffdio_register reg = {.range = {pairs[2 * i], pairs[2 * i + 1] - pairs[2 * i]},
                                  .mode = UFFDIO_REGISTER_MODE_WP | UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(c->uffd, UFFDIO_REGISTER, &reg) != 0) {
      add_pair(&c->refused, &c->nrefused, &c->refused_cap, pairs[2 * i], pairs[2 * i + 1]);
      continue;
    }
    if (c->nranges == c->ranges_cap) {
      size_t cap = c->ranges_cap ? c->ranges_cap * 2 : 64;
      uint64_t *r = realloc(c->ranges, cap * 2 * sizeof(*r));
      if (!r) {
        struct uffdio_range u = {pairs[2 * i], pairs[2 * i + 1] - pairs[2 * i]};
        ioctl(c->uffd, UFFDIO_UNREGISTER, &u);
        continue;
      }
      c->ranges = r;
      c->ranges_cap = cap;
    }
    c->ranges[2 * c->nranges] = pairs[2 * i];
    c->ranges[2 * c->nranges + 1] = pairs[2 * i + 1];
    c->nranges++;
    done++;
  }
  return done;
}

int ur_cow_seal(struct ur_cow *c) {
  uint64_t t0 = now_ns();
  pthread_mutex_lock(&c->lock);
  __atomic_store_n(&c->sealed, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&c->lock);
  if (__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE)) return -ENOMEM;
  /* Pairs of one page each, sorted into runs. The first UR_COW_SEAL_SAVE
   * pages are saved now and left unprotected: the target wrote them while
   * the protection ran, so it is about to write them again, and each such
   * write after the release would wait for the server (with the scan's
   * threads on every core, a time slice or more). The rest is protected
   * again. */
  qsort(c->dirty, c->ndirty, 2 * sizeof(uint64_t), ur_by_first_u64);
  size_t saved = 0;
  for (size_t i = 0; i < c->ndirty;) {
    uint64_t b = c->dirty[2 * i], e = c->dirty[2 * i + 1];
    size_t j = i + 1;
    while (j < c->ndirty && c->dirty[2 * j] <= e) {
      if (c->dirty[2 * j + 1] > e) e = c->dirty[2 * j + 1];
      j++;
    }
    while (b < e && saved < UR_COW_SEAL_SAVE && keep(c, b) == 0) {
      b += PAGE;
      saved++;
    }
    c->seal_saved = saved;
    i = j;
    if (b == e) continue;
    if (ur_writeprotect_pieces(c->uffd, b, e, 1) != 0) {
      int err = errno;
      give_up(c);
      return -err;
    }
  }
  if (ur_cow_save(c, c->refused, c->nrefused) < 0) {
    give_up(c);
    return -ENOMEM;
  }
  c->seal_ns = now_ns() - t0;
  return 0;
}

int ur_cow_protect(struct ur_cow *c) {
  uint64_t t0 = now_ns();
  for (size_t i = c->protected_upto; i < c->nranges; i++) {
    /* In pieces: the target's mmap lock is let go between them, so its
     * threads that map, unmap or grow the heap meanwhile wait one piece's
     * walk, not the whole heap's (write_protect.h). */
    if (ur_writeprotect_pieces(c->uffd, c->ranges[2 * i], c->ranges[2 * i + 1], 0) != 0) {
      int e = errno;
      give_up(c);
      return -e;
    }
  }
  uint64_t t1 = now_ns();
  for (size_t i = c->protected_upto; i < c->nranges; i++)
    walk_present(c, c->ranges[2 * i], c->ranges[2 * i + 1]);
  c->present_ns += now_ns() - t1;
  c->protected_upto = c->nranges;
  c->protect_ns += t1 - t0;
  return 0;
}

void ur_cow_overlay(struct ur_cow *c, uint64_t addr, uint8_t *buf, size_t len, uint64_t *bad,
                    size_t first_page) {
  if (!c || len == 0 || __atomic_load_n(&c->n, __ATOMIC_ACQUIRE) == 0) return;
  uint64_t end = addr + len;
  pthread_mutex_lock(&c->lock);
  for (uint64_t page = addr & ~(uint64_t)(PAGE - 1); page < end; page += PAGE) {
    uint8_t *saved = lookup(c, page);
    if (!saved) continue;
    uint64_t lo = page < addr ? addr : page, hi = page + PAGE > end ? end : page + PAGE;
    memcpy(buf + (lo - addr), saved + (lo - page), hi - lo);
    if (bad) {
      size_t k = first_page + (size_t)((page - addr) >> 12);
      bad[k / 64] &= ~(UINT64_C(1) << (k % 64));
    }
  }
  pthread_mutex_unlock(&c->lock);
}

void ur_cow_close(struct ur_cow *c) {
  if (c->uffd >= 0) {
    for (size_t i = 0; i < c->nranges; i++) {
      /* Unregistering clears the range's write protection (Linux 6.0 on;
       * a copy-on-write snapshot needs 6.7): one walk of the page tables,
       * not two; in pieces, so the target's mmap lock is let go between
       * them, each followed by its wake (write_protect.h). */
      ur_unregister_pieces(c->uffd, c->ranges[2 * i], c->ranges[2 * i + 1], UR_WALK_CHUNK);
    }
  }
  if (c->serving) {
    if (write(c->wake[1], "x", 1) < 0) { /* the thread sees the pipe */
    }
    pthread_join(c->server, NULL);
    c->serving = 0;
  }
  if (c->uffd >= 0) close(c->uffd);
  if (c->memfd >= 0) close(c->memfd);
  if (c->pagemap >= 0) close(c->pagemap);
  if (c->wake[0] >= 0) close(c->wake[0]);
  if (c->wake[1] >= 0) close(c->wake[1]);
  for (size_t i = 0; i < c->nslabs; i++) munmap(c->slabs[i], SLAB);
  free(c->slabs);
  free(c->keys);
  free(c->vals);
  free(c->ranges);
  free(c->refused);
  free(c->dirty);
  free(c->present);
  free(c->lost_runs);
  c->present = c->lost_runs = NULL;
  c->npresent = c->present_cap = c->nlost = c->lost_cap = 0;
  c->dirty = NULL;
  c->ndirty = 0;
  c->refused = NULL;
  c->nrefused = 0;
  pthread_mutex_destroy(&c->lock);
  c->uffd = c->memfd = c->pagemap = c->wake[0] = c->wake[1] = -1;
  c->slabs = NULL;
  c->keys = NULL;
  c->vals = NULL;
  c->ranges = NULL;
  c->nslabs = c->cap = c->n = c->nranges = 0;
}

static int present_parts(struct ur_cow *c, const uint64_t *in, size_t n, uint64_t **out,
                         size_t *n_out);

int ur_cow_present(struct ur_cow *c, const uint64_t *in, size_t n, uint64_t **out, size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  pthread_mutex_lock(&c->lock);
  int rc = present_parts(c, in, n, out, n_out);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

static int present_parts(struct ur_cow *c, const uint64_t *in, size_t n, uint64_t **out,
                         size_t *n_out) {
  if (!c->present_known) return -1;
  sort_present(c);
  size_t cap = 0;
  for (size_t i = 0, k = 0; i < n; i++) {
    uint64_t b = in[2 * i], e = in[2 * i + 1];
    while (k < c->npresent && c->present[2 * k + 1] <= b) k++;
    for (size_t j = k; j < c->npresent && c->present[2 * j] < e; j++) {
      uint64_t lo = c->present[2 * j] > b ? c->present[2 * j] : b;
      uint64_t hi = c->present[2 * j + 1] < e ? c->present[2 * j + 1] : e;
      if (lo < hi && add_pair(out, n_out, &cap, lo, hi) < 0) return -1;
    }
  }
  return 0;
}

uint64_t *ur_cow_lost(struct ur_cow *c, size_t *n) {
  pthread_mutex_lock(&c->lock);
  uint64_t *v = c->nlost ? malloc(c->nlost * 2 * sizeof(*v)) : NULL;
  *n = v ? c->nlost : 0;
  if (v) memcpy(v, c->lost_runs, c->nlost * 2 * sizeof(*v));
  pthread_mutex_unlock(&c->lock);
  return v;
}

int ur_cow_covers(struct ur_cow *c, uint64_t addr, size_t len) {
  int found = 0;
  pthread_mutex_lock(&c->lock);
  for (size_t i = 0; i < c->nranges && !found; i++)
    found = c->ranges[2 * i] < addr + len && addr < c->ranges[2 * i + 1];
  pthread_mutex_unlock(&c->lock);
  return found;
}
