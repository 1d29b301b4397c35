/*
 * C unit tests of the mark core (native/mark: HeapWalker, LeakFolding, radix
 * sort) over both of its memory backends: the scanner's chunked reader of
 * /proc/self/mem (run under ASan+UBSan), and, built with -DUR_TEST_DIRECT
 * (no sanitizers: it loads whole words past odd block ends), the snapshot
 * child's direct loads over the readable ranges of /proc/self/maps; run by
 * tests/mark/test_heap_walker_c.py.
 * Ports libmemunreachable's HeapWalker_test and LeakFolding_test: the
 * "heap" is buffers of this process, read back through /proc/self/mem.
 *
 * Usage: walker_test CASE   (exit 0 = pass)
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc.h"
#include "heap_walker.h"
#include "leak_folding.h"
#include "mem_direct.h"
#include "memory.h"
#include "pthread_team.h"
#include "radix_sort.h"
#include "raw_thread.h"
#include "unit_test.h"

#define W sizeof(uintptr_t)
#define BEGIN(b) ((uint64_t)(uintptr_t)&(b)[0])
#define END(b) ((uint64_t)(uintptr_t)&(b)[0] + sizeof(b))

/* The walker reads memory behind the compiler's back: force the stores. */
static void escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

struct result {
  uint32_t *unreachable;
  size_t nunreachable;
  struct ur_leak *leaks;
  size_t nleaks;
  uint64_t pages_skipped;
  size_t overlapping;
  uint64_t unreachable_bytes;
  uint64_t handed_over;
  unsigned marked_by;
  int graph;
  uint64_t bytes_scanned;
};

static uint64_t allocs[4096 * 2];
static size_t nallocs;
static uint64_t roots[64 * 2];
static size_t nroots;
static uint64_t values[64];
static size_t nvalues;

static void reset(void) { nallocs = nroots = nvalues = 0; }
static void alloc(uint64_t b, uint64_t e) {
  allocs[2 * nallocs] = b;
  allocs[2 * nallocs + 1] = e - b;
  nallocs++;
}
static void root(uint64_t b, uint64_t e) {
  roots[2 * nroots] = b;
  roots[2 * nroots + 1] = e;
  nroots++;
}

#ifdef UR_TEST_DIRECT
/* The readable mappings of this process, as the scanner lists them. */
static size_t readable_ranges(uint64_t *out, size_t cap) {
  FILE *f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL);
  char line[512];
  size_t n = 0;
  while (n < cap && fgets(line, sizeof(line), f)) {
    unsigned long long b, e;
    char perms[8];
    if (sscanf(line, "%llx-%llx %7s", &b, &e, perms) != 3 || perms[0] != 'r') continue;
    if (strstr(line, "[vvar") || strstr(line, "[vdso]") || strstr(line, "[vsyscall]")) continue;
    out[2 * n] = b;
    out[2 * n + 1] = e;
    n++;
  }
  fclose(f);
  return n;
}
#endif

/* UR_TEST_TEAM=N: every sweep marks with N threads, each reading through a
 * backend of its own: raw clones with direct loads (as the snapshot child
 * runs them), pthreads under the sanitizers with the /proc reader. */
static unsigned team_size(void) {
  const char *s = getenv("UR_TEST_TEAM");
  unsigned n = s ? (unsigned)atoi(s) : 1;
  return n >= 1 && n <= 16 ? n : 1;
}

/* UR_TEST_PARTIAL=1: the graph is partial (ref_graph.h): never given up,
 * the blocks past the budget read again in passes. */
static int partial_mode(void) { return getenv("UR_TEST_PARTIAL") != NULL; }

/* UR_TEST_MAX_EDGES=N: the reference graph's budget (0: mark by walking,
 * tiny: the build gives up and the walk takes over). */
static void set_edge_budget(struct ur_walker *w) {
  const char *s = getenv("UR_TEST_MAX_EDGES");
  if (s) w->max_edges = strtoull(s, NULL, 0);
  w->partial_graph = partial_mode();
}


static void sweep_with(const uint64_t *a, size_t na, const uint64_t *r, size_t nr,
                       const uint64_t *v, size_t nv, struct result *res) {
  unsigned nteam = team_size();
#ifdef UR_TEST_DIRECT
  static uint64_t ranges[2 * 4096];
  size_t nranges = readable_ranges(ranges, 4096);
  struct ur_direct_mem ms[16];
  for (unsigned k = 0; k < nteam; k++) CHECK_EQ(ur_direct_open(&ms[k], ranges, nranges), 0);
  ur_direct_catch_faults(&ms[0]);
  struct ur_raw_threads team = {.n = 0};
  const struct ur_team_ops ops = {ur_raw_thread_start, ur_raw_thread_join, &team};
#elif defined(UR_TEST_FROZEN)
  /* As a copy snapshot is swept: everything the walk reads is loaded once,
   * frozen, and each further thread reads it through a view of its own. */
  struct ur_pread_mem ms[1];
  struct ur_frozen_view views[16];
  CHECK_EQ(ur_mem_open(&ms[0], getpid(), 0), 0);
  CHECK_EQ(ur_mem_reserve(&ms[0], r, nr), 0);
  for (size_t i = 0; i < na; i++) {
    uint64_t span[2] = {a[2 * i], a[2 * i] + (a[2 * i + 1] ? a[2 * i + 1] : 1)};
    CHECK_EQ(ur_mem_reserve(&ms[0], span, 1), 0);
  }
  ur_mem_fill(&ms[0], 0, 2);
  ur_mem_freeze(&ms[0]);
  for (unsigned k = 1; k < nteam; k++) ur_frozen_view_init(&views[k], &ms[0]);
  struct ur_pthread_team team = {.n = 0};
  const struct ur_team_ops ops = {ur_pthread_team_start, ur_pthread_team_join, &team};
#else
  struct ur_pread_mem ms[16];
  for (unsigned k = 0; k < nteam; k++) CHECK_EQ(ur_mem_open(&ms[k], getpid(), 0), 0);
  struct ur_pthread_team team = {.n = 0};
  const struct ur_team_ops ops = {ur_pthread_team_start, ur_pthread_team_join, &team};
#endif
  struct ur_mem *mems[16];
#ifdef UR_TEST_FROZEN
  mems[0] = &ms[0].mem;
  for (unsigned k = 1; k < nteam; k++) mems[k] = &views[k].mem;
#else
  for (unsigned k = 0; k < nteam; k++) mems[k] = &ms[k].mem;
#endif
  struct ur_walker w;
  CHECK_EQ(ur_walker_init(&w, mems[0], a, na, UR_SIZES_REQUESTED), 0);
  set_edge_budget(&w);
  if (nteam > 1)
    CHECK_EQ(ur_walker_mark_team(&w, mems, nteam, &ops, r, nr, v, nv), 0);
  else
    CHECK_EQ(ur_walker_mark(&w, r, nr, v, nv), 0);
  memset(res, 0, sizeof(*res));
  res->handed_over = w.handed_over;
  res->marked_by = w.marked_by;
  res->graph = w.has_graph;
  res->bytes_scanned = w.bytes_scanned;
  /* Marking by graph is the default; a budget it fits in is no fallback. */
  const char *budget = getenv("UR_TEST_MAX_EDGES");
  if (!budget && w.n) CHECK(w.has_graph);
  CHECK_EQ(ur_fold_leaks(&w, &res->unreachable, &res->nunreachable, &res->leaks, &res->nleaks),
           0);
  for (size_t i = 0; i < res->nunreachable; i++) {
    uint64_t s = a[2 * res->unreachable[i] + 1];
    res->unreachable_bytes += s;
  }
  for (unsigned k = 0; k < nteam; k++) res->pages_skipped += mems[k]->pages_skipped;
  res->overlapping = w.overlapping;
  ur_walker_free(&w);
#ifdef UR_TEST_DIRECT
  ur_direct_catch_faults(NULL);
  for (unsigned k = 0; k < nteam; k++) ur_direct_close(&ms[k]);
#elif defined(UR_TEST_FROZEN)
  ur_mem_close(&ms[0]);
#else
  for (unsigned k = 0; k < nteam; k++) ur_mem_close(&ms[k]);
#endif
}

static void sweep(struct result *res) {
  sweep_with(allocs, nallocs, roots, nroots, values, nvalues, res);
}

static void result_free(struct result *r) {
  ur_big_free(r->unreachable);
  ur_big_free(r->leaks);
}

/* ---- HeapWalker_test ---- */

static void t_allocation(void) {
  reset();
  alloc(3, 4);
  alloc(5, 6);
  alloc(1, 2);
  struct ur_mem m = {0};
  struct ur_walker w;
  CHECK_EQ(ur_walker_init(&w, &m, allocs, nallocs, UR_SIZES_REQUESTED), 0);
  CHECK_EQ(w.n, 3);
  CHECK_EQ(w.overlapping, 0);
  CHECK_EQ(ur_walker_begin(&w, 0), 1);
  CHECK_EQ(ur_walker_orig(&w, 0), 2);
  CHECK_EQ(ur_walker_find(&w, 3), 1);
  CHECK_EQ(ur_walker_find(&w, 4), 1); /* one past its end */
  CHECK_EQ(ur_walker_find(&w, 6), 2);
  CHECK_EQ(ur_walker_find(&w, 7), (uint64_t)-1);
  CHECK_EQ(ur_walker_find(&w, 0), (uint64_t)-1);
  ur_walker_free(&w);
}

/* Usable sizes (a glibc walk without the shim): a block ending on a page,
 * as one mmap'ed alone ends its mapping, is not reached past its end; one
 * ending elsewhere is, as with requested sizes. */
static void t_usable_end(void) {
  reset();
  alloc(0x10010, 0x11000);
  alloc(0x20010, 0x20028);
  struct ur_mem m = {0};
  struct ur_walker w;
  for (int usable = 0; usable < 2; usable++) {
    CHECK_EQ(ur_walker_init(&w, &m, allocs, nallocs, usable ? UR_SIZES_USABLE : UR_SIZES_REQUESTED),
             0);
    CHECK_EQ(ur_walker_find(&w, 0x10ff8), 0);
    CHECK_EQ(ur_walker_find(&w, 0x11000), usable ? (uint64_t)-1 : 0);
    CHECK_EQ(ur_walker_find(&w, 0x20028), 1);
    CHECK_EQ(ur_walker_find(&w, 0x20029), (uint64_t)-1);
    ur_walker_free(&w);
  }
}

static size_t overlaps(uint64_t b1, uint64_t e1, uint64_t b2, uint64_t e2) {
  reset();
  alloc(b1, e1);
  alloc(b2, e2);
  struct ur_mem m = {0};
  struct ur_walker w;
  CHECK_EQ(ur_walker_init(&w, &m, allocs, nallocs, UR_SIZES_REQUESTED), 0);
  size_t o = w.overlapping;
  CHECK_EQ(w.n + o, 2);
  ur_walker_free(&w);
  return o;
}

static void t_overlap(void) {
  CHECK_EQ(overlaps(2, 3, 2, 3), 1);
  CHECK_EQ(overlaps(2, 5, 1, 3), 1);
  CHECK_EQ(overlaps(2, 5, 4, 6), 1);
  CHECK_EQ(overlaps(2, 5, 3, 4), 1);
  CHECK_EQ(overlaps(2, 5, 1, 6), 1);
  CHECK_EQ(overlaps(2, 3, 3, 4), 0);
  CHECK_EQ(overlaps(3, 4, 2, 3), 0);
}

static void t_zero(void) {
  CHECK_EQ(overlaps(2, 2, 2, 2), 1);
  CHECK_EQ(overlaps(2, 2, 2, 3), 1);
  CHECK_EQ(overlaps(2, 2, 3, 3), 0);
  CHECK_EQ(overlaps(2, 2, 1, 2), 0);
}

static void t_leak(void) {
  void *buffer1[16] = {0};
  char buffer2[16] = {0};
  buffer1[0] = (void *)((uintptr_t)&buffer2[0] - W);
  buffer1[1] = (void *)((uintptr_t)&buffer2[15] + W);
  escape(buffer1);
  reset();
  alloc(BEGIN(buffer2), END(buffer2));
  root(BEGIN(buffer1), END(buffer1));
  struct result r;
  sweep(&r);
  CHECK_EQ(r.nunreachable, 1);
  CHECK_EQ(r.unreachable_bytes, 16);
  CHECK_EQ(r.nleaks, 1);
  CHECK_EQ(r.leaks[0].index, 0);
  result_free(&r);
}

static void t_live(void) {
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 16; j++) {
      void *buffer1[4] = {0};
      char buffer2[16] = {0};
      buffer1[i] = &buffer2[j];
      escape(buffer1);
      reset();
      alloc(BEGIN(buffer2), END(buffer2));
      root(BEGIN(buffer1), END(buffer1));
      struct result r;
      sweep(&r);
      CHECK_EQ(r.nunreachable, 0);
      CHECK_EQ(r.nleaks, 0);
      result_free(&r);
    }
  }
}

static void t_unaligned(void) {
  void *buffer1[4] = {0};
  char buffer2[16] = {0};
  buffer1[1] = &buffer2;
  escape(buffer1);
  for (unsigned i = 0; i < W; i++) {
    for (unsigned j = 0; j < W; j++) {
      reset();
      alloc(BEGIN(buffer2), END(buffer2));
      root(BEGIN(buffer1) + i, END(buffer1) - j);
      struct result r;
      sweep(&r);
      CHECK_EQ(r.nunreachable, 0);
      result_free(&r);
    }
  }
}

/* Words are tested four at a time for zero before the range reject
 * (mem.h, ur_zero_words4): a pointer at any word of a root or of a block,
 * among zeros, inside a group of four or among the last words past the
 * last whole group, is still found. */
static void t_zero_groups(void) {
  static void *from[12];
  static void *root_word[1];
  static char to[16];
  for (unsigned n = 1; n <= 12; n++) {
    for (unsigned at = 0; at < n; at++) {
      for (int in_block = 0; in_block < 2; in_block++) {
        memset(from, 0, sizeof(from));
        from[at] = &to[at % sizeof(to)];
        root_word[0] = from;
        escape(from);
        escape(root_word);
        reset();
        alloc(BEGIN(to), END(to));
        uint64_t b = (uint64_t)(uintptr_t)from, e = (uint64_t)(uintptr_t)&from[n];
        if (in_block) {
          alloc(b, e);
          root(BEGIN(root_word), END(root_word));
        } else {
          root(b, e);
        }
        struct result r;
        sweep(&r);
        CHECK_EQ(r.nunreachable, 0);
        result_free(&r);
      }
    }
  }
}

/* A block of a huge allocation mostly never touched: over direct loads
 * only its pages that exist are read (mem.present), and the pointers on
 * them, first word to last, are found. A private file mapping's pages are
 * absent until touched yet hold the file: they are read. */
static void t_sparse_block(void) {
  size_t len = (size_t)64 << 20;
  uint8_t *big = mmap(NULL, len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK(big != MAP_FAILED);
  static char to[3][16];
  static void *root_word[1];
  void *first = to[0], *middle = to[1], *last = to[2];
  memcpy(big, &first, sizeof(first));
  memcpy(big + len / 2 + 64, &middle, sizeof(middle));
  memcpy(big + len - 8, &last, sizeof(last));
  root_word[0] = big;
  escape(root_word);
  reset();
  for (int k = 0; k < 3; k++) alloc(BEGIN(to[k]), END(to[k]));
  alloc((uint64_t)(uintptr_t)big, (uint64_t)(uintptr_t)big + len);
  root(BEGIN(root_word), END(root_word));
  struct result r;
  sweep(&r);
  CHECK_EQ(r.nunreachable, 0);
#ifdef UR_TEST_DIRECT
  CHECK(r.bytes_scanned < ((uint64_t)1 << 20));
#endif
  result_free(&r);
  CHECK_EQ(munmap(big, len), 0);

  char path[] = "/tmp/walker_sparse_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  CHECK_EQ(ftruncate(fd, (off_t)len), 0);
  CHECK_EQ(pwrite(fd, &middle, sizeof(middle), (off_t)(len / 2)), (ssize_t)sizeof(middle));
  uint8_t *file = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
  CHECK(file != MAP_FAILED);
  root_word[0] = file;
  escape(root_word);
  reset();
  alloc(BEGIN(to[1]), END(to[1]));
  alloc((uint64_t)(uintptr_t)file, (uint64_t)(uintptr_t)file + len);
  root(BEGIN(root_word), END(root_word));
  sweep(&r);
  CHECK_EQ(r.nunreachable, 0);
  result_free(&r);
  CHECK_EQ(munmap(file, len), 0);
  close(fd);
}

static void t_cycle(void) {
  void *buffer1[1];
  void *buffer2[1];
  buffer1[0] = &buffer2;
  buffer2[0] = &buffer1;
  escape(buffer1);
  escape(buffer2);
  reset();
  alloc(BEGIN(buffer1), END(buffer1));
  alloc(BEGIN(buffer2), END(buffer2));
  struct result r;
  sweep(&r);
  CHECK_EQ(r.nunreachable, 2);
  CHECK_EQ(r.unreachable_bytes, 2 * W);
  result_free(&r);
}

/* Root value (a register) keeps a block alive; a block only a root value
 * points into, interior, too. */
static void t_values(void) {
  char buffer1[32] = {0};
  void *buffer2[2] = {0};
  buffer2[0] = &buffer1[3];
  escape(buffer2);
  reset();
  alloc(BEGIN(buffer1), END(buffer1));
  alloc(BEGIN(buffer2), END(buffer2));
  values[nvalues++] = BEGIN(buffer2) + 9;
  struct result r;
  sweep(&r);
  CHECK_EQ(r.nunreachable, 0);
  result_free(&r);
}

/* An allocation on an unreadable page (a file page past EOF: /proc/PID/mem
 * says EIO, a direct load SIGBUS) is walked without failing, stays live, and
 * the page is counted once. (Not a munmapped hole: the walker's own mmaps
 * could land in it.) */
static void t_segv(void) {
  long ps = sysconf(_SC_PAGESIZE);
  char *p = mmap(NULL, 3 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  int mfd = memfd_create("walker_test", MFD_CLOEXEC); /* size 0: every page is past EOF */
  CHECK(mfd >= 0);
  CHECK(mmap(p + ps, ps, PROT_READ, MAP_SHARED | MAP_FIXED, mfd, 0) == p + ps);
  close(mfd);
  void *buffer2[2];
  buffer2[0] = p + ps;
  buffer2[1] = p + ps + 8;
  escape(buffer2);
  reset();
  alloc((uint64_t)(uintptr_t)(p + ps), (uint64_t)(uintptr_t)(p + 2 * ps));
  root(BEGIN(buffer2), END(buffer2));
  struct result r;
  sweep(&r);
  CHECK_EQ(r.nunreachable, 0);
  CHECK_EQ(r.pages_skipped, 1);
  result_free(&r);
  /* PROT_NONE: the kernel may or may not let /proc/self/mem read it; either
   * way no crash and no leak. */
  CHECK_EQ(mprotect(p, ps, PROT_NONE), 0);
  buffer2[0] = p;
  escape(buffer2);
  reset();
  alloc((uint64_t)(uintptr_t)p, (uint64_t)(uintptr_t)(p + ps));
  root(BEGIN(buffer2), END(buffer2));
  sweep(&r);
  CHECK_EQ(r.nunreachable, 0);
  result_free(&r);
  munmap(p, 3 * ps);
}

/* A pointer into a block that reaches past the chunk boundary and a block
 * spanning several chunks. */
static void t_big(void) {
  size_t sz = 3 * UR_CHUNK_SIZE + 40;
  char *big = malloc(sz);
  CHECK(big != NULL);
  memset(big, 0, sz);
  void **small = malloc(64);
  memset(small, 0, 64);
  memcpy(big + sz - 8, &small, 8); /* last word of big points to small */
  void *buffer1[1] = {big + sz - 1};
  escape(buffer1);
  escape(big);
  reset();
  alloc((uint64_t)(uintptr_t)big, (uint64_t)(uintptr_t)big + sz);
  alloc((uint64_t)(uintptr_t)small, (uint64_t)(uintptr_t)small + 64);
  root(BEGIN(buffer1), END(buffer1));
  struct result r;
  sweep(&r);
  CHECK_EQ(r.nunreachable, 0);
  result_free(&r);
  free(big);
  free(small);
}

/* ---- LeakFolding_test ---- */

/* Per allocation, in the order of alloc(): whether it is a reported leak and
 * what it references. Every unreachable block counts once: as a leak or
 * under exactly one leak's references. */
struct want {
  int leak;
  uint64_t ref_count, ref_size;
};
#define LEAK(c, s) {1, c, s}
#define BELOW {0, 0, 0}

struct expect {
  size_t num_leaks, leaked_bytes, entries;
  const struct want *want;
};

static void fold_check(struct expect e) {
  struct result r;
  sweep(&r);
  CHECK_EQ(r.nunreachable, e.num_leaks);
  CHECK_EQ(r.unreachable_bytes, e.leaked_bytes);
  CHECK_EQ(r.nleaks, e.entries);
  uint64_t count = 0, bytes = 0;
  for (size_t i = 0; i < r.nleaks; i++) {
    const struct want *w = &e.want[r.leaks[i].index];
    CHECK(w->leak);
    CHECK_EQ(r.leaks[i].referenced_count, w->ref_count);
    CHECK_EQ(r.leaks[i].referenced_size, w->ref_size);
    CHECK_EQ(r.leaks[i].reserved, 0);
    count += 1 + r.leaks[i].referenced_count;
    bytes += allocs[2 * r.leaks[i].index + 1] + r.leaks[i].referenced_size;
  }
  CHECK_EQ(count, r.nunreachable);
  CHECK_EQ(bytes, r.unreachable_bytes);
  result_free(&r);
}

#define ALLOC(b) alloc(BEGIN(b), END(b))
#define WANT(...) ((const struct want[]){__VA_ARGS__})

static void t_fold_one(void) {
  void *buffer1[1] = {NULL};
  escape(buffer1);
  reset();
  ALLOC(buffer1);
  fold_check((struct expect){1, W, 1, WANT(LEAK(0, 0))});
}

static void t_fold_two(void) {
  void *buffer1[1] = {NULL};
  void *buffer2[1] = {NULL};
  escape(buffer1);
  escape(buffer2);
  reset();
  ALLOC(buffer1);
  ALLOC(buffer2);
  fold_check((struct expect){2, 2 * W, 2, WANT(LEAK(0, 0), LEAK(0, 0))});
}

static void t_fold_dominator(void) {
  void *buffer1[1];
  void *buffer2[1] = {NULL};
  buffer1[0] = buffer2;
  escape(buffer1);
  escape(buffer2);
  reset();
  ALLOC(buffer1);
  ALLOC(buffer2);
  fold_check((struct expect){2, 2 * W, 1, WANT(LEAK(1, W), BELOW)});
}

static void t_fold_cycle(void) {
  void *buffer1[1];
  void *buffer2[1];
  void *buffer3[1];
  buffer1[0] = buffer2;
  buffer2[0] = buffer3;
  buffer3[0] = buffer2;
  escape(buffer1);
  escape(buffer2);
  escape(buffer3);
  reset();
  ALLOC(buffer1);
  ALLOC(buffer2);
  ALLOC(buffer3);
  fold_check((struct expect){3, 3 * W, 1, WANT(LEAK(2, 2 * W), BELOW, BELOW)});
}

/* A cycle of roots with a tail: the tail counts under the member that
 * points at it, not under both. */
static void t_fold_dominator_cycle(void) {
  void *buffer1[2] = {NULL, NULL};
  void *buffer2[2];
  void *buffer3[1] = {NULL};
  buffer1[0] = &buffer2;
  buffer2[0] = &buffer1;
  buffer2[1] = &buffer3;
  escape(buffer1);
  escape(buffer2);
  escape(buffer3);
  reset();
  ALLOC(buffer1);
  ALLOC(buffer2);
  ALLOC(buffer3);
  fold_check((struct expect){3, 5 * W, 2, WANT(LEAK(0, 0), LEAK(1, W), BELOW)});
}

/* Few unreachable blocks among many marked ones (one in 64 or fewer): the
 * fold finds their nodes by a search, not a table per block. Their edges to
 * marked blocks count for nothing; the structure among them folds as
 * fold_dominator_cycle's. */
static void t_fold_few_among_many(void) {
  enum { n = 256 };
  static void *reached[n][1];
  static void *holder[n];
  static void *buffer1[2], *buffer2[2], *buffer3[1];
  static struct want want[n + 3];
  reset();
  for (size_t i = 0; i < n; i++) {
    holder[i] = reached[i];
    reached[i][0] = i % 2 ? reached[i - 1] : NULL;
    ALLOC(reached[i]);
    want[i] = (struct want)BELOW;
  }
  buffer1[0] = &buffer2;
  buffer1[1] = reached[7];
  buffer2[0] = &buffer1;
  buffer2[1] = &buffer3;
  buffer3[0] = reached[200];
  escape(holder);
  escape(reached);
  escape(buffer1);
  escape(buffer2);
  escape(buffer3);
  ALLOC(buffer1);
  ALLOC(buffer2);
  ALLOC(buffer3);
  root(BEGIN(holder), END(holder));
  want[n] = (struct want)LEAK(0, 0);
  want[n + 1] = (struct want)LEAK(1, W);
  want[n + 2] = (struct want)BELOW;
  fold_check((struct expect){3, 5 * W, 2, want});
}

static void t_fold_two_cycles(void) {
  void *b1[1], *b2[1], *b3[1], *b4[1], *b5[1], *b6[1];
  b1[0] = b3;
  b2[0] = b5;
  b3[0] = b4;
  b4[0] = b3;
  b5[0] = b6;
  b6[0] = b5;
  void **all[] = {b1, b2, b3, b4, b5, b6};
  reset();
  for (int i = 0; i < 6; i++) {
    escape(all[i]);
    alloc((uint64_t)(uintptr_t)all[i], (uint64_t)(uintptr_t)all[i] + W);
  }
  fold_check((struct expect){
      6, 6 * W, 2, WANT(LEAK(2, 2 * W), LEAK(2, 2 * W), BELOW, BELOW, BELOW, BELOW)});
}

static void t_fold_two_dominator_cycles(void) {
  void *b1[1], *b2[1], *b3[1], *b4[1];
  b1[0] = b2;
  b2[0] = b1;
  b3[0] = b4;
  b4[0] = b3;
  void **all[] = {b1, b2, b3, b4};
  reset();
  for (int i = 0; i < 4; i++) {
    escape(all[i]);
    alloc((uint64_t)(uintptr_t)all[i], (uint64_t)(uintptr_t)all[i] + W);
  }
  fold_check(
      (struct expect){4, 4 * W, 4, WANT(LEAK(0, 0), LEAK(0, 0), LEAK(0, 0), LEAK(0, 0))});
}

static void t_fold_giant_dominator_cycle(void) {
  enum { n = 1000 };
  static void *buffer[n];
  static struct want want[n];
  reset();
  for (size_t i = 0; i < n; i++) {
    alloc((uint64_t)(uintptr_t)&buffer[i], (uint64_t)(uintptr_t)&buffer[i + 1]);
    want[i] = (struct want)LEAK(0, 0);
  }
  for (size_t i = 0; i < n - 1; i++) buffer[i] = &buffer[i + 1];
  buffer[n - 1] = &buffer[0];
  escape(buffer);
  fold_check((struct expect){n, n * W, n, want});
}

static void t_fold_giant_cycle(void) {
  enum { n = 1000 };
  static void *buffer[n];
  static void *buffer1[1];
  static struct want want[n + 1];
  for (size_t i = 0; i < n - 1; i++) buffer[i] = &buffer[i + 1];
  buffer[n - 1] = &buffer[0];
  buffer1[0] = &buffer[0];
  escape(buffer);
  escape(buffer1);
  reset();
  for (size_t i = 0; i < n; i++)
    alloc((uint64_t)(uintptr_t)&buffer[i], (uint64_t)(uintptr_t)&buffer[i + 1]);
  ALLOC(buffer1);
  want[n] = (struct want)LEAK(n, n * W);
  fold_check((struct expect){n + 1, (n + 1) * W, 1, want});
}

static void t_fold_multipath(void) {
  void *buffer1[2];
  void *buffer2[1];
  void *buffer3[1];
  void *buffer4[1] = {NULL};
  buffer1[0] = &buffer2;
  buffer1[1] = &buffer3;
  buffer2[0] = &buffer4;
  buffer3[0] = &buffer4;
  escape(buffer1);
  escape(buffer2);
  escape(buffer3);
  escape(buffer4);
  reset();
  ALLOC(buffer1);
  ALLOC(buffer2);
  ALLOC(buffer3);
  ALLOC(buffer4);
  fold_check((struct expect){4, 5 * W, 1, WANT(LEAK(3, 3 * W), BELOW, BELOW, BELOW)});
}

static void t_fold_multicycle(void) {
  void *buffer1[2] = {0};
  void *buffer2[2] = {0};
  void *buffer3[2] = {0};
  void *buffer4[2] = {0};
  buffer1[0] = &buffer2;
  buffer2[0] = &buffer3;
  buffer2[1] = &buffer4;
  buffer3[0] = &buffer1;
  buffer4[0] = &buffer3;
  escape(buffer1);
  escape(buffer2);
  escape(buffer3);
  escape(buffer4);
  reset();
  ALLOC(buffer1);
  ALLOC(buffer2);
  ALLOC(buffer3);
  ALLOC(buffer4);
  fold_check(
      (struct expect){4, 8 * W, 4, WANT(LEAK(0, 0), LEAK(0, 0), LEAK(0, 0), LEAK(0, 0))});
}

/* Two roots sharing a child: it counts under the nearer root, whichever
 * address it has, and the block below it too. */
static void t_fold_shared_child(void) {
  void *near[1], *far[1], *mid[1], *shared[1], *below[1] = {NULL};
  far[0] = mid;
  mid[0] = shared;
  near[0] = shared;
  shared[0] = below;
  void **all[] = {far, near, mid, shared, below};
  reset();
  for (int i = 0; i < 5; i++) {
    escape(all[i]);
    alloc((uint64_t)(uintptr_t)all[i], (uint64_t)(uintptr_t)all[i] + W);
  }
  fold_check((struct expect){
      5, 5 * W, 2, WANT(LEAK(1, W), LEAK(2, 2 * W), BELOW, BELOW, BELOW)});
}

/* Two roots as near to a child: it counts under the lower-addressed. */
static void t_fold_shared_tie(void) {
  static void *block[3][2]; /* ascending addresses */
  block[0][0] = &block[2];
  block[1][0] = &block[2];
  escape(block);
  reset();
  alloc((uint64_t)(uintptr_t)&block[1], (uint64_t)(uintptr_t)&block[2]);
  alloc((uint64_t)(uintptr_t)&block[2], (uint64_t)(uintptr_t)&block[3]);
  alloc((uint64_t)(uintptr_t)&block[0], (uint64_t)(uintptr_t)&block[1]);
  fold_check((struct expect){3, 6 * W, 2, WANT(LEAK(0, 0), BELOW, LEAK(1, 2 * W))});
}

/* A self-pointer is not an edge: buffer1 (pointing at itself) is still
 * only below buffer2, not a dominator of its own. */
static void t_fold_self(void) {
  void *buffer1[1];
  void *buffer2[1];
  buffer1[0] = &buffer1[0];
  buffer2[0] = &buffer1;
  escape(buffer1);
  escape(buffer2);
  reset();
  ALLOC(buffer1);
  ALLOC(buffer2);
  fold_check((struct expect){2, 2 * W, 1, WANT(BELOW, LEAK(1, W))});
}

/* ---- graph-level folding against a brute-force reference ---- */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void t_fold_reference(void) {
  for (int round = 0; round < 300; round++) {
    size_t n = 1 + rnd() % 60;
    size_t m = rnd() % (3 * n + 1);
    uint64_t *size = malloc(n * sizeof(*size));
    size_t *off = calloc(n + 1, sizeof(*off));
    uint32_t *src = malloc((m ? m : 1) * sizeof(*src)), *dst = malloc((m ? m : 1) * sizeof(*dst));
    uint32_t *adj = malloc((m ? m : 1) * sizeof(*adj));
    uint8_t *reach = calloc(n * n, 1);
    for (size_t i = 0; i < n; i++) size[i] = rnd() % 100;
    for (size_t e = 0; e < m; e++) {
      src[e] = (uint32_t)(rnd() % n);
      dst[e] = (uint32_t)(rnd() % n);
      off[src[e] + 1]++;
    }
    for (size_t i = 0; i < n; i++) off[i + 1] += off[i];
    size_t *fill = malloc(n * sizeof(*fill));
    memcpy(fill, off, n * sizeof(*fill));
    for (size_t e = 0; e < m; e++) adj[fill[src[e]]++] = dst[e];
    /* reach[v*n+u]: u reachable from v (v itself included). */
    for (size_t v = 0; v < n; v++) {
      reach[v * n + v] = 1;
      for (int changed = 1; changed;) {
        changed = 0;
        for (size_t e = 0; e < m; e++)
          if (reach[v * n + src[e]] && !reach[v * n + dst[e]]) reach[v * n + dst[e]] = changed = 1;
      }
    }
    struct ur_leak *leaks;
    size_t nleaks;
    CHECK_EQ(ur_fold_graph(n, size, off, adj, &leaks, &nleaks), 0);
    /* dist[v*n+u]: fewest edges from v to u (n: unreachable), by relaxation. */
    size_t *dist = malloc(n * n * sizeof(*dist));
    for (size_t v = 0; v < n; v++) {
      for (size_t u = 0; u < n; u++) dist[v * n + u] = u == v ? 0 : n;
      for (int changed = 1; changed;) {
        changed = 0;
        for (size_t e = 0; e < m; e++)
          if (dist[v * n + src[e]] + 1 < dist[v * n + dst[e]])
            dist[v * n + dst[e]] = dist[v * n + src[e]] + 1, changed = 1;
      }
    }
    /* v is a leak iff its SCC has no edge in from a node outside it. */
    uint8_t *is_leak = calloc(n, 1);
    for (size_t v = 0; v < n; v++) {
      int dominated = 0;
      for (size_t e = 0; e < m; e++) {
        size_t x = src[e], y = dst[e];
        int y_in = reach[v * n + y] && reach[y * n + v];
        int x_in = reach[v * n + x] && reach[x * n + v];
        if (y_in && !x_in) dominated = 1;
      }
      is_leak[v] = !dominated;
    }
    /* Every other node under the nearest leak, the lowest among equals. */
    uint64_t *ref_count = calloc(n, sizeof(*ref_count)), *ref_size = calloc(n, sizeof(*ref_size));
    for (size_t u = 0; u < n; u++) {
      if (is_leak[u]) continue;
      size_t best = n;
      for (size_t v = 0; v < n; v++)
        if (is_leak[v] && dist[v * n + u] < n && (best == n || dist[v * n + u] < dist[best * n + u]))
          best = v;
      CHECK(best < n);
      ref_count[best]++;
      ref_size[best] += size[u];
    }
    size_t k = 0;
    for (size_t v = 0; v < n; v++) {
      if (!is_leak[v]) continue;
      CHECK(k < nleaks);
      CHECK_EQ(leaks[k].index, v);
      CHECK_EQ(leaks[k].referenced_count, ref_count[v]);
      CHECK_EQ(leaks[k].referenced_size, ref_size[v]);
      k++;
    }
    CHECK_EQ(k, nleaks);
    free(dist);
    free(is_leak);
    free(ref_count);
    free(ref_size);
    ur_big_free(leaks);
    free(size);
    free(off);
    free(src);
    free(dst);
    free(adj);
    free(reach);
    free(fill);
  }
}

/* ---- scale: the iterative paths with a million nodes ---- */

enum { SCALE_N = 1000000 };

static void t_scale_chain(void) {
  /* A 1M-long linked list of 16-byte nodes: marking from a root and, unrooted,
   * Tarjan both go 1M deep. */
  void **nodes = malloc(SCALE_N * 2 * sizeof(void *));
  uint64_t *a = malloc(SCALE_N * 2 * sizeof(uint64_t));
  CHECK(nodes && a);
  for (size_t i = 0; i < SCALE_N; i++) {
    nodes[2 * i] = i + 1 < SCALE_N ? (void *)&nodes[2 * (i + 1)] : NULL;
    nodes[2 * i + 1] = NULL;
    /* reverse input order: the walker must sort */
    a[2 * (SCALE_N - 1 - i)] = (uint64_t)(uintptr_t)&nodes[2 * i];
    a[2 * (SCALE_N - 1 - i) + 1] = 16;
  }
  escape(nodes);
  void *root_word[1] = {nodes};
  escape(root_word);
  uint64_t r[2] = {BEGIN(root_word), END(root_word)};
  struct result res;
  sweep_with(a, SCALE_N, r, 1, NULL, 0, &res);
  CHECK_EQ(res.nunreachable, 0);
  result_free(&res);
  sweep_with(a, SCALE_N, NULL, 0, NULL, 0, &res);
  CHECK_EQ(res.nunreachable, SCALE_N);
  CHECK_EQ(res.nleaks, 1);
  CHECK_EQ(res.leaks[0].index, SCALE_N - 1); /* the head, input index reversed */
  CHECK_EQ(res.leaks[0].referenced_count, SCALE_N - 1);
  CHECK_EQ(res.leaks[0].referenced_size, (uint64_t)(SCALE_N - 1) * 16);
  result_free(&res);
  /* Close the ring: one SCC of 1M members, each a leak entry of its own. */
  nodes[2 * (SCALE_N - 1)] = &nodes[0];
  escape(nodes);
  sweep_with(a, SCALE_N, NULL, 0, NULL, 0, &res);
  CHECK_EQ(res.nleaks, SCALE_N);
  CHECK_EQ(res.leaks[12345].referenced_count, 0);
  result_free(&res);
  free(nodes);
  free(a);
}

static void t_scale_random(void) {
  /* 1M nodes with two random pointers each (plus noise words), a tenth of
   * them rooted: exercises lookup, marking order and the SCC DAG at scale. */
  void **nodes = malloc(SCALE_N * 4 * sizeof(void *));
  uint64_t *a = malloc(SCALE_N * 2 * sizeof(uint64_t));
  void **rootv = malloc(SCALE_N / 10 * sizeof(void *));
  CHECK(nodes && a && rootv);
  for (size_t i = 0; i < SCALE_N; i++) {
    nodes[4 * i] = &nodes[4 * (rnd() % SCALE_N)];
    nodes[4 * i + 1] = (char *)&nodes[4 * (rnd() % SCALE_N)] + rnd() % 32;
    nodes[4 * i + 2] = (void *)(uintptr_t)rnd();
    nodes[4 * i + 3] = NULL;
    a[2 * i] = (uint64_t)(uintptr_t)&nodes[4 * i];
    a[2 * i + 1] = 32;
  }
  for (size_t i = 0; i < SCALE_N / 10; i++) rootv[i] = &nodes[4 * (rnd() % SCALE_N)];
  escape(nodes);
  escape(rootv);
  uint64_t r[2] = {(uint64_t)(uintptr_t)rootv, (uint64_t)(uintptr_t)(rootv + SCALE_N / 10)};
  struct result res;
  sweep_with(a, SCALE_N, r, 1, NULL, 0, &res);
  /* A team shares this much work (else it marked alone, however right):
   * the graph's build and its walk, or the walk of the heap. */
  /* Partial, every block is dense: read in passes by one thread. */
  if (team_size() > 1) CHECK(res.marked_by > 1 && (res.handed_over > 0 || partial_mode()));
  /* Cross-check marking against a plain BFS over the same graph. */
  uint8_t *live = calloc(SCALE_N, 1);
  uint32_t *q = malloc(SCALE_N * sizeof(*q));
  size_t qh = 0, qt = 0;
  for (size_t i = 0; i < SCALE_N / 10; i++) {
    size_t t = (size_t)((void **)rootv[i] - nodes) / 4;
    if (!live[t]) live[t] = 1, q[qt++] = (uint32_t)t;
  }
  while (qh < qt) {
    size_t v = q[qh++];
    for (int k = 0; k < 2; k++) {
      size_t t = (size_t)((uintptr_t)nodes[4 * v + k] - (uintptr_t)nodes) / 32;
      if (!live[t]) live[t] = 1, q[qt++] = (uint32_t)t;
    }
  }
  CHECK_EQ(res.nunreachable, SCALE_N - qt);
  for (size_t i = 0; i < res.nunreachable; i++) CHECK(!live[res.unreachable[i]]);
  uint64_t total = 0;
  for (size_t i = 0; i < res.nleaks; i++) {
    CHECK(!live[res.leaks[i].index]);
    total += 1 + res.leaks[i].referenced_count;
  }
  CHECK_EQ(total, res.nunreachable); /* each block once */
  result_free(&res);
  free(live);
  free(q);
  free(nodes);
  free(a);
  free(rootv);
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

static void t_radix_sort(void) {
  size_t sizes[] = {0, 1, 5, 63, 64, 1000, 100000};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(*sizes); s++) {
    size_t n = sizes[s];
    uint64_t *k = malloc((n + 1) * 8), *ref = malloc((n + 1) * 8);
    uint32_t *v = malloc((n + 1) * 4);
    for (size_t i = 0; i < n; i++) {
      k[i] = (i % 3 == 0) ? (rnd() & 0xffff) : (0x7f0000000000ull | (rnd() & 0xffffffff));
      ref[i] = k[i];
      v[i] = (uint32_t)i;
    }
    uint64_t *orig = malloc((n + 1) * 8);
    memcpy(orig, k, n * 8);
    CHECK_EQ(ur_radix_sort(k, v, n), 0);
    qsort(ref, n, 8, cmp_u64);
    for (size_t i = 0; i < n; i++) {
      CHECK_EQ(k[i], ref[i]);
      CHECK_EQ(orig[v[i]], k[i]);
      if (i && k[i] == k[i - 1]) CHECK(v[i] > v[i - 1]); /* stable */
    }
    free(k);
    free(ref);
    free(v);
    free(orig);
  }
}

/* The chunk cache with a tiny bound: eviction must not change results. */
/* n zeroed blocks of sz bytes. */
static char **zeroed_blocks(size_t n, size_t sz) {
  char **blocks = malloc(n * sizeof(*blocks));
  CHECK(blocks != NULL);
  for (size_t i = 0; i < n; i++) {
    blocks[i] = malloc(sz);
    CHECK(blocks[i] != NULL);
    memset(blocks[i], 0, sz);
  }
  return blocks;
}

/* Mark the blocks (n of sz bytes) from blocks[0] through a cache of four
 * chunks, check that exactly the first `live` are marked, free them. */
static void mark_through_4_chunks(char **blocks, size_t n, size_t sz, size_t live) {
  uint64_t *a = malloc(n * 2 * 8);
  CHECK(a != NULL);
  for (size_t i = 0; i < n; i++) {
    a[2 * i] = (uint64_t)(uintptr_t)blocks[i];
    a[2 * i + 1] = sz;
  }
  escape(blocks);
  void *rw[1] = {blocks[0]};
  escape(rw);
  uint64_t r[2] = {BEGIN(rw), END(rw)};
  struct ur_pread_mem m;
  CHECK_EQ(ur_mem_open(&m, getpid(), 4 * UR_CHUNK_SIZE), 0);
  CHECK_EQ(m.max_chunks, 4);
  struct ur_walker w;
  CHECK_EQ(ur_walker_init(&w, &m.mem, a, n, UR_SIZES_REQUESTED), 0);
  set_edge_budget(&w);
  CHECK_EQ(ur_walker_mark(&w, r, 1, NULL, 0), 0);
  for (size_t i = 0; i < w.n; i++) CHECK_EQ(w.marked[i], ur_walker_orig(&w, i) < live);
  CHECK(m.used_chunks <= 4);
  ur_walker_free(&w);
  ur_mem_close(&m);
  for (size_t i = 0; i < n; i++) free(blocks[i]);
  free(blocks);
  free(a);
}

static void t_cache_eviction(void) {
  /* A chain of 64 half-chunk blocks: far more than the cache holds. */
  size_t n = 64;
  char **blocks = zeroed_blocks(n, UR_CHUNK_SIZE / 2);
  for (size_t i = 0; i + 1 < n; i++) memcpy(blocks[i] + 4096, &blocks[i + 1], 8);
  mark_through_4_chunks(blocks, n, UR_CHUNK_SIZE / 2, n);
}

static void t_cache_tree(void) {
  /* A tree of blocks that straddle chunk boundaries: the mark keeps several
   * blocks in flight, and none of their views may be evicted before it is
   * scanned. Each block points to its children from its first and its last
   * word (past its first chunk); the last 16 blocks form a tree of their own
   * that nothing roots. */
  size_t n = 96, live = n - 16, sz = UR_CHUNK_SIZE / 3 + 24;
  char **blocks = zeroed_blocks(n, sz);
  for (size_t k = 0; k < n; k++) {
    size_t base = k < live ? 0 : live, cnt = k < live ? live : n - live, j = k - base;
    if (2 * j + 1 < cnt) memcpy(blocks[k], &blocks[base + 2 * j + 1], 8);
    if (2 * j + 2 < cnt) memcpy(blocks[k] + ((sz - 8) & ~(size_t)7), &blocks[base + 2 * j + 2], 8);
  }
  mark_through_4_chunks(blocks, n, sz, live);
}

/* A partial graph over 8 MiB of 128-byte blocks through a 4-chunk cache:
 * even blocks hold 16 pointers (a chain link and 15 leaves, the odd blocks
 * after it), far over a budget of 2 edges a block, so most are dense and
 * read again in passes. order: 0 chains down the heap from its top, 1 up
 * from its bottom, 2 a few links in random order, every block dense. The marks equal the
 * walk's; a chain in address order takes one pass each way and reads the
 * heap about twice (the graph's pass, one pass), however deep. */
#define N_HEAP_BYTES (65536 * 128)
static void partial_chain(int order, unsigned max_passes, uint64_t max_read) {
  enum { N = 65536, WORDS = 16, LINKS = 40 };
  uintptr_t *heap = ur_big_calloc((size_t)N * WORDS, sizeof(uintptr_t));
  uint64_t *a = ur_big_calloc(2 * (size_t)N, sizeof(uint64_t));
  uint32_t *perm = ur_big_calloc(LINKS, sizeof(uint32_t));
  CHECK(heap && a && perm);
  for (size_t i = 0; i < N; i++) {
    a[2 * i] = (uint64_t)(uintptr_t)&heap[i * WORDS];
    a[2 * i + 1] = WORDS * sizeof(uintptr_t);
  }
  uint64_t s = 88172645463325252ULL;
  for (uint32_t k = 0; k < LINKS; k++) perm[k] = k;
  for (uint32_t k = LINKS - 1; k > 0; k--) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    uint32_t j = (uint32_t)(s % (k + 1)), t = perm[k];
    perm[k] = perm[j], perm[j] = t;
  }
  size_t links = order == 2 ? LINKS : N / 2, head = 0;
  for (size_t k = 0; k < links; k++) {
    /* link k's block, and the one before it on the chain */
    size_t at = order == 0 ? 2 * (links - 1 - k) : order == 1 ? 2 * k : (N / LINKS) * perm[k] & ~1u;
    size_t prev = order == 0 ? at + 2 : order == 1 ? at - 2 : (N / LINKS) * perm[k - !!k] & ~1u;
    if (k == 0) head = at;
    else heap[prev * WORDS] = (uintptr_t)&heap[at * WORDS];
    for (size_t w = 1; w < WORDS && at + 2 * w - 1 < N; w++)
      heap[at * WORDS + w] = (uintptr_t)&heap[(at + 2 * w - 1) * WORDS];
  }
  escape(heap);
  void *rw[1] = {&heap[head * WORDS]};
  escape(rw);
  uint64_t r[2] = {BEGIN(rw), END(rw)};
  uint8_t *walked = ur_big_calloc(N, 1);
  CHECK(walked != NULL);
  for (int partial = 0; partial < 2; partial++) {
    struct ur_pread_mem m;
    CHECK_EQ(ur_mem_open(&m, getpid(), partial ? 4 * UR_CHUNK_SIZE : 0), 0);
    struct ur_walker w;
    CHECK_EQ(ur_walker_init(&w, &m.mem, a, N, UR_SIZES_REQUESTED), 0);
    w.max_edges = partial ? (order == 2 ? 1 : 2 * (uint64_t)N) : 0;
    w.partial_graph = partial;
    CHECK_EQ(ur_walker_mark(&w, r, 1, NULL, 0), 0);
    for (size_t i = 0; i < N; i++) {
      CHECK(w.marked[i] <= 1);
      if (partial) CHECK_EQ(w.marked[i], walked[i]);
      else walked[i] = w.marked[i];
    }
    if (partial) {
      printf("order %d: %u passes, %" PRIu64 " bytes read, %" PRIu64 " edges\n", order, w.passes,
             m.bytes_loaded, w.graph.edges);
      CHECK(w.has_graph && w.graph.dense);
      CHECK(w.passes <= max_passes);
      CHECK(m.bytes_loaded <= max_read);
    }
    ur_walker_free(&w);
    ur_mem_close(&m);
  }
  size_t live = 0;
  for (size_t i = 0; i < N; i++) live += walked[i];
  CHECK(live >= links);
  ur_big_free(walked);
  ur_big_free(perm);
  ur_big_free(a);
  ur_big_free(heap);
}

static void t_partial_down(void) {
  partial_chain(0, 2, 2 * (uint64_t)N_HEAP_BYTES + 4 * UR_CHUNK_SIZE);
}
static void t_partial_up(void) {
  partial_chain(1, 2, 2 * (uint64_t)N_HEAP_BYTES + 4 * UR_CHUNK_SIZE);
}
static void t_partial_random(void) { partial_chain(2, 80, UINT64_MAX); }

/* ---- page index and reference graph ---- */

/* The containing block by brute force: the reference for ur_walker_find. */
static ssize_t find_slowly(const struct ur_walker *w, uint64_t v) {
  /* Inside or one past the end; of a block's end and the next one's
   * begin, the begin (the last match). */
  ssize_t hit = -1;
  for (size_t i = 0; i < w->n; i++)
    if (ur_walker_begin(w, i) <= v && v - ur_walker_begin(w, i) <= ur_walker_size(w, i))
      hit = (ssize_t)i;
  return hit;
}

static void t_page_index(void) {
  /* Blocks dense enough to be indexed, of every small size and gap, some
   * reaching across a page into the next, a few big ones spanning pages,
   * some pages with a block off the 16-byte grid: every address of the span
   * (and a little beyond) finds what a linear search finds. */
  static uint64_t a[2 * 3000];
  size_t n = 0;
  uint64_t at = 0x100000;
  for (size_t i = 0; i < 3000; i++) {
    uint64_t size = i % 97 == 0 ? 4096 + rnd() % 9000 : rnd() % 100;
    uint64_t gap = (rnd() % 4) * 16;
    at += gap;
    if (i % 211 == 5) at += 8; /* off the grid: that page is left to the buckets */
    a[2 * n] = at;
    a[2 * n + 1] = size;
    n++;
    at += size ? size : 1;
    at = (at + 15) & ~UINT64_C(15);
  }
  struct ur_mem m = {0};
  struct ur_walker w;
  CHECK_EQ(ur_walker_init(&w, &m, a, n, UR_SIZES_REQUESTED), 0);
  CHECK(w.index.pages.slots != NULL);
  CHECK(w.index.pages.pages > 10);
  size_t irregular = 0;
  for (uint64_t i = 0; i <= w.index.pages.mask; i++)
    irregular += w.index.pages.slots[i].irregular;
  CHECK(irregular > 0);
  /* The blocks left out of the buckets are those whose every page has an
   * entry that answers (asked page by page here): some, not all. */
  static uint8_t answered[3000];
  ur_page_index_answered(&w.index.pages, &w.index.runs, w.pairs, w.n, answered);
  size_t left_out = 0;
  for (size_t i = 0; i < w.n; i++) {
    int want = 1;
    for (uint64_t p = ur_walker_begin(&w, i) >> UR_PAGE_INDEX_SHIFT;
         p <= (ur_walker_begin(&w, i) + ur_walker_size(&w, i)) >> UR_PAGE_INDEX_SHIFT; p++)
      if (!ur_page_entry_of(&w.index.pages, p)) want = 0;
    CHECK_EQ(answered[i], want);
    left_out += want;
  }
  CHECK(left_out > 0 && left_out < w.n);
  size_t hits = 0;
  for (uint64_t v = 0x100000 - 64; v < at + 64; v++) {
    ssize_t want = find_slowly(&w, v);
    CHECK_EQ(ur_walker_find(&w, v), want);
    hits += want >= 0;
  }
  CHECK(hits > 0);
  ur_walker_free(&w);
}

/* 16 pages of 15 on-grid 64-byte begins (one past the end of each block
 * is the next; the last reaches 36 bytes into the page after), each
 * followed by two pages where, for the first `sparse` of them, one block
 * begins off the grid and reaches into the second: whether a page index
 * is built, and every address of the span finds what a linear search
 * finds. */
static void page_share_case(size_t sparse, int want_index) {
  static uint64_t a[2 * 512];
  size_t n = 0;
  uint64_t at = 0x200000;
  for (size_t p = 0; p < 16 || p < sparse; p++) {
    for (size_t k = 0; p < 16 && k < 15; k++, n++) {
      a[2 * n] = at + 64 * k;
      a[2 * n + 1] = k == 14 ? 164 : 64;
    }
    at += 1024;
    if (p < sparse) {
      a[2 * n] = at + 0x108;
      a[2 * n + 1] = 1500;
      n++;
    }
    at += 2048;
  }
  struct ur_mem m = {0};
  struct ur_walker w;
  CHECK_EQ(ur_walker_init(&w, &m, a, n, UR_SIZES_REQUESTED), 0);
  CHECK_EQ(w.index.pages.slots != NULL, want_index);
  if (want_index) CHECK_EQ(w.index.pages.pages, 16);
  size_t hits = 0;
  for (uint64_t v = 0x200000 - 64; v < at + 64; v++) {
    ssize_t want = find_slowly(&w, v);
    CHECK_EQ(ur_walker_find(&w, v), want);
    hits += want >= 0;
  }
  CHECK(hits > 0);
  ur_walker_free(&w);
}

static void t_page_index_share(void) {
  /* 240 blocks in dense pages: with 16 more elsewhere (one in 16 of all)
   * the page index is built, with 17 it is not, and lookups are right
   * both ways. */
  page_share_case(16, 1);
  page_share_case(17, 0);
}

/* The containing block by binary search over the sorted pairs: the
 * reference for the run index's cases, too many addresses for find_slowly. */
static ssize_t find_sorted(const struct ur_walker *w, uint64_t v) {
  size_t lo = 0, hi = w->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ur_walker_begin(w, mid) <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && v - ur_walker_begin(w, lo - 1) <= ur_walker_size(w, lo - 1) ? (ssize_t)lo - 1
                                                                               : -1;
}

/* n blocks of size bytes, stride apart, from at. */
static size_t run_of(uint64_t *a, size_t k, uint64_t at, size_t n, uint64_t size,
                     uint64_t stride) {
  for (size_t i = 0; i < n; i++, k++) {
    a[2 * k] = at + i * stride;
    a[2 * k + 1] = size;
  }
  return k;
}

static void t_run_index(void) {
  /* 64 KiB chunks of equal blocks, answered by arithmetic, beside chunks
   * that are not (too few begins, a block of another size, one big block):
   * every address of the span, and a little beyond, finds what a search of
   * the sorted blocks finds. */
  enum { CHUNK = 1 << UR_RUN_SHIFT };
  const uint64_t c = UINT64_C(0x10000000);
  static uint64_t a[2 * 4096];
  size_t n = 0;
  n = run_of(a, n, c - 0x3000, 1, 0x3028, 0); /* reaches 0x28 into chunk 0 */
  /* chunk 0: 240 B every 256 from 0x30; the last reaches 0x20 into chunk 1 */
  n = run_of(a, n, c + 0x30, 256, 240, 256);
  /* chunk 1: 40 B every 48 from 0x20 (one past the end of the one before);
   * the last reaches 8 bytes into chunk 2 */
  n = run_of(a, n, c + CHUNK + 0x20, 1365, 40, 48);
  /* chunk 2: 32-byte blocks and one of another size: not a run */
  n = run_of(a, n, c + 2 * CHUNK + 0x10, 20, 32, 32);
  n = run_of(a, n, c + 2 * CHUNK + 0x400, 1, 100, 0);
  /* chunk 3: equal blocks, too few of them */
  n = run_of(a, n, c + 3 * CHUNK, UR_RUN_MIN_BEGINS - 1, 64, 64);
  /* chunk 4: zero-size blocks (each owns its address), off the 16-byte grid */
  n = run_of(a, n, c + 4 * CHUNK + 8, 20, 0, 24);
  /* chunks 5-7: one block from chunk 5 to 0x100 into chunk 7, then blocks
   * of 16 bytes back to back (one past each end is the next) */
  n = run_of(a, n, c + 5 * CHUNK, 1, 2 * CHUNK + 0x100, 0);
  n = run_of(a, n, c + 7 * CHUNK + 0x100, 32, 16, 16);
  /* chunk 8: 4 KiB blocks filling it, the last ending at its end */
  n = run_of(a, n, c + 8 * CHUNK, 16, 4096, 4096);
  uint64_t top = c + 9 * CHUNK;
  struct ur_mem m = {0};
  struct ur_walker w;
  CHECK_EQ(ur_walker_init(&w, &m, a, n, UR_SIZES_REQUESTED), 0);
  CHECK_EQ(w.index.runs.chunks, 5); /* chunks 0, 1, 4, 7 and 8 */
  for (uint64_t k = 0; k <= 8; k++) {
    int want = k == 0 || k == 1 || k == 4 || k == 7 || k == 8;
    CHECK_EQ(ur_run_entry_of(&w.index.runs, (c >> UR_RUN_SHIFT) + k) != NULL, want);
    /* The page index leaves the run index's chunks to it. */
    for (uint64_t p = (c + k * CHUNK) >> UR_PAGE_INDEX_SHIFT;
         want && p < (c + (k + 1) * CHUNK) >> UR_PAGE_INDEX_SHIFT; p++)
      CHECK(ur_page_entry_of(&w.index.pages, p) == NULL);
  }
  /* Blocks left out of the buckets: those whose every chunk has an entry. */
  static uint8_t answered[4096];
  memset(answered, 0, sizeof(answered));
  ur_run_index_answered(&w.index.runs, w.pairs, answered);
  for (size_t i = 0; i < w.n; i++) {
    int want = 1;
    for (uint64_t k = ur_walker_begin(&w, i) >> UR_RUN_SHIFT;
         k <= (ur_walker_begin(&w, i) + ur_walker_size(&w, i)) >> UR_RUN_SHIFT; k++)
      if (!ur_run_entry_of(&w.index.runs, k)) want = 0;
    CHECK_EQ(answered[i], want);
  }
  size_t hits = 0;
  for (uint64_t v = c - 0x3000 - 64; v < top + 64; v++) {
    ssize_t want = find_sorted(&w, v);
    CHECK_EQ(ur_walker_find(&w, v), want);
    hits += want >= 0;
  }
  CHECK(hits > 0);
  ur_walker_free(&w);
}

/* A heap of equal blocks (40 bytes, 48 apart, across two chunks and more)
 * marked through the run index: blocks 0-999 are a chain from the root of
 * interior pointers, and block 999 holds block 1000's begin + beyond, the
 * only way to the chain 1000-2047. */
static void run_sweep_case(uint64_t beyond, size_t unreachable) {
  enum { N = 2048, STRIDE = 48, SIZE = 40 };
  static uint8_t heap[N * STRIDE + 64] __attribute__((aligned(1 << UR_RUN_SHIFT)));
  uint8_t *base = heap + 16;
  memset(heap, 0, sizeof(heap));
  for (size_t i = 0; i + 1 < N; i++) {
    if (i == 999) continue;
    uintptr_t next = (uintptr_t)(base + (i + 1) * STRIDE + (i % 5) * 8 + 1);
    memcpy(base + i * STRIDE, &next, sizeof(next));
  }
  uintptr_t past = (uintptr_t)(base + 1000 * STRIDE + beyond);
  memcpy(base + 999 * STRIDE + 8, &past, sizeof(past));
  escape(heap);
  reset();
  for (size_t i = 0; i < N; i++)
    alloc((uint64_t)(uintptr_t)(base + i * STRIDE), (uint64_t)(uintptr_t)(base + i * STRIDE + SIZE));
  uintptr_t rw[1] = {(uintptr_t)(base + 3)};
  escape(rw);
  root(BEGIN(rw), END(rw));
  struct result r;
  sweep(&r);
  CHECK_EQ(r.nunreachable, unreachable);
  for (size_t i = 0; i < r.nunreachable; i++) CHECK(r.unreachable[i] >= 1000);
  result_free(&r);
}

static void t_run_sweep(void) {
  run_sweep_case(39, 0);   /* its last byte */
  run_sweep_case(40, 0);   /* one past its end: a C array kept by its end */
  run_sweep_case(41, 1048); /* into the gap before the next block: none */
}

static void t_graph_budget(void) {
  /* More edges than the budget: the build gives up and the walk marks, with
   * the same result; a budget the heap fits keeps the graph. A block points
   * to its successor many times over (one edge) and to itself (none). */
  enum { N = 64 };
  static uintptr_t blocks[N][8];
  for (size_t i = 0; i < N; i++) {
    for (size_t k = 0; k < 6; k++) blocks[i][k] = (uintptr_t)blocks[(i + 1) % N];
    blocks[i][6] = (uintptr_t)&blocks[i][3];
    blocks[i][7] = (uintptr_t)blocks[(i + 5) % N];
  }
  blocks[N / 2 - 1][0] = 0; /* the ring broken after block N/2 - 1 */
  for (size_t k = 1; k < 6; k++) blocks[N / 2 - 1][k] = 0;
  blocks[N / 2 - 1][7] = 0;
  escape(blocks);
  reset();
  for (size_t i = 0; i < N; i++) alloc(BEGIN(blocks[i]), END(blocks[i]));
  uintptr_t rw[1] = {(uintptr_t)blocks[N / 2]};
  escape(rw);
  root(BEGIN(rw), END(rw));
  struct result base, small, fits;
  unsetenv("UR_TEST_MAX_EDGES");
  sweep(&base);
  CHECK(base.graph);
  setenv("UR_TEST_MAX_EDGES", "3", 1);
  sweep(&small);
  CHECK(small.graph == partial_mode()); /* partial: never given up */
  setenv("UR_TEST_MAX_EDGES", "128", 1); /* two edges a block */
  sweep(&fits);
  CHECK(fits.graph);
  unsetenv("UR_TEST_MAX_EDGES");
  /* Blocks N/2..N-1 reach 0..N/2-1 by the ring and the +5 jumps: all live. */
  CHECK_EQ(base.nunreachable, 0);
  CHECK_EQ(small.nunreachable, 0);
  CHECK_EQ(fits.nunreachable, 0);
  result_free(&base);
  result_free(&small);
  result_free(&fits);
  /* Unrooted, the folding sees one leak holding the rest, graph or walk. */
  nroots = 0;
  sweep(&base);
  setenv("UR_TEST_MAX_EDGES", "3", 1);
  sweep(&small);
  unsetenv("UR_TEST_MAX_EDGES");
  CHECK(base.graph && small.graph == partial_mode());
  CHECK_EQ(base.nleaks, small.nleaks);
  CHECK_EQ(base.nunreachable, N);
  for (size_t i = 0; i < base.nleaks; i++) {
    CHECK_EQ(base.leaks[i].index, small.leaks[i].index);
    CHECK_EQ(base.leaks[i].referenced_count, small.leaks[i].referenced_count);
    CHECK_EQ(base.leaks[i].referenced_size, small.leaks[i].referenced_size);
  }
  result_free(&base);
  result_free(&small);
}

/* Buckets touched by the blocks the run and page indexes leave to them,
 * counted at one shift: the reference for the bucket size. */
static uint64_t buckets_slowly(const struct ur_alloc_index *ix, const uint8_t *skip,
                               unsigned shift) {
  uint64_t total = 0, last = UINT64_MAX;
  for (size_t i = 0; i < ix->n; i++) {
    if (skip[i]) continue;
    uint64_t b = ix->pairs[2 * i], first = b >> shift;
    uint64_t final = (b + ix->pairs[2 * i + 1]) >> shift; /* one past the end reaches */
    total += final - first + (first != last);
    last = final;
  }
  return total;
}

/* The buckets' size is the smallest from 2^8 bytes whose buckets number at
 * most a quarter of the blocks and 4096 more, as counting every size in
 * turn finds it; in fewer passes over the blocks than that takes. */
static void bucket_case(const uint64_t *a, size_t n) {
  struct ur_mem m = {0};
  struct ur_walker w;
  CHECK_EQ(ur_walker_init(&w, &m, a, n, UR_SIZES_REQUESTED), 0);
  static uint8_t skip[40000];
  CHECK(w.index.n <= sizeof skip);
  ur_page_index_answered(&w.index.pages, &w.index.runs, w.index.pairs, w.index.n, skip);
  ur_run_index_answered(&w.index.runs, w.index.pairs, skip);
  uint64_t limit = w.index.n / 4 + 4096;
  unsigned shift = 8;
  while (buckets_slowly(&w.index, skip, shift) > limit && shift < 40) shift++;
  CHECK(w.index.buckets != NULL);
  CHECK_EQ(w.index.bucket_shift, shift);
  CHECK(shift > 9);
  CHECK(w.index.bucket_passes < shift - 8 + 1);
  for (size_t i = 0; i < n; i += 97) CHECK_EQ(ur_walker_find(&w, a[2 * i] + 1), (ssize_t)i);
  ur_walker_free(&w);
}

static void t_bucket_shift(void) {
  static uint64_t a[2 * 40000];
  /* Small blocks 64 KiB apart: each its own bucket up to 2^16 bytes. */
  for (size_t i = 0; i < 20000; i++) {
    a[2 * i] = 0x10000000 + i * 65536 + 16 * (i % 5);
    a[2 * i + 1] = 16 + 8 * (i % 7);
  }
  bucket_case(a, 20000);
  /* A heap of 16-1040 B blocks (log-uniform) side by side, as
   * bench/peer_lsan_bench.py's. */
  uint64_t at = 0x20000000;
  for (size_t i = 0; i < 40000; i++) {
    uint64_t size = 16 << (rnd() % 7);
    size += rnd() % size;
    a[2 * i] = at;
    a[2 * i + 1] = size;
    at += (size + 16 + 15) & ~UINT64_C(15);
  }
  bucket_case(a, 40000);
}

struct test {
  const char *name;
  void (*fn)(void);
};

static const struct test tests[] = {
    {"allocation", t_allocation},
    {"overlap", t_overlap},
    {"zero", t_zero},
    {"leak", t_leak},
    {"live", t_live},
    {"unaligned", t_unaligned},
    {"zero_groups", t_zero_groups},
    {"sparse_block", t_sparse_block},
    {"cycle", t_cycle},
    {"values", t_values},
    {"segv", t_segv},
    {"big", t_big},
    {"fold_one", t_fold_one},
    {"fold_two", t_fold_two},
    {"fold_dominator", t_fold_dominator},
    {"fold_cycle", t_fold_cycle},
    {"fold_dominator_cycle", t_fold_dominator_cycle},
    {"fold_few_among_many", t_fold_few_among_many},
    {"fold_two_cycles", t_fold_two_cycles},
    {"fold_two_dominator_cycles", t_fold_two_dominator_cycles},
    {"fold_giant_dominator_cycle", t_fold_giant_dominator_cycle},
    {"fold_giant_cycle", t_fold_giant_cycle},
    {"fold_multipath", t_fold_multipath},
    {"fold_multicycle", t_fold_multicycle},
    {"fold_self", t_fold_self},
    {"fold_shared_child", t_fold_shared_child},
    {"fold_shared_tie", t_fold_shared_tie},
    {"fold_reference", t_fold_reference},
    {"scale_chain", t_scale_chain},
    {"scale_random", t_scale_random},
    {"radix_sort", t_radix_sort},
    {"cache_eviction", t_cache_eviction},
    {"cache_tree", t_cache_tree},
    {"page_index", t_page_index},
    {"page_index_share", t_page_index_share},
    {"run_index", t_run_index},
    {"run_sweep", t_run_sweep},
    {"graph_budget", t_graph_budget},
    {"partial_down", t_partial_down},
    {"partial_up", t_partial_up},
    {"partial_random", t_partial_random},
    {"usable_end", t_usable_end},
    {"bucket_shift", t_bucket_shift},
};

int main(int argc, char **argv) {
  size_t ntests = sizeof(tests) / sizeof(*tests);
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < ntests; i++) puts(tests[i].name);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: %s CASE|--list\n", argv[0]);
    return 2;
  }
  for (size_t i = 0; i < ntests; i++) {
    if (strcmp(argv[1], tests[i].name) == 0) {
      tests[i].fn();
      printf("ok %s\n", tests[i].name);
      return 0;
    }
  }
  fprintf(stderr, "unknown case %s\n", argv[1]);
  return 2;
}
