/* The heap bench/peer_lsan_bench.py scans, built twice: once to run under the
 * shim, once with -fsanitize=leak (LSan's own allocator, its check called in
 * here).
 *
 *   peer_heap BYTES MIN MAX THREADS
 *
 * THREADS threads allocate BYTES of blocks between MIN and MAX bytes
 * (log-uniform, so a 16 B - 64 KiB heap has as many small blocks as big
 * ones), each block's first word pointing to the block its thread made
 * before it, every block held by a global array; one block in a thousand is
 * dropped (a leak). Then THREADS-1 threads keep working (each writes its
 * last 256 blocks in turn, a service's hot set) and a heartbeat thread spins on
 * the clock, recording the longest gap it sees: the stall the program feels.
 *
 * Commands on stdin, one per line, answers on stdout:
 *   r   reset the longest gap          -> "ok"
 *   g   the longest gap since r, in us -> "gap US AT" (AT: CLOCK_MONOTONIC ns at its end)
 *   h   every gap of LOG_NS or more since r, oldest first, then "end":
 *       "FROM TO CPU0 CPU1" per gap (CLOCK_MONOTONIC ns at its start and end,
 *       the core the heartbeat ran on before it and after); the log keeps
 *       the last LOG_MAX.
 *   l   LSan's recoverable leak check  -> "lsan US LEAKED" (or "lsan none")
 * Prints "READY N" once the heap is made. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static size_t g_bytes, g_min, g_max;
static int g_threads;
static void **g_live;
static size_t g_cap;
static atomic_size_t g_count;
static atomic_int g_made;
static atomic_llong g_gap_ns;
static atomic_llong g_gap_at; /* CLOCK_MONOTONIC ns at the end of the longest gap */
static atomic_int g_reset;

/* Every gap, not only the longest: which of them overlap a scan's stops
 * and which lie outside them, and how many a quiet second has
 * (bench/peer_lsan_bench.py, docs/pause.md "What the target feels"). */
#define LOG_NS 200000
#define LOG_MAX 4096
struct gap {
  uint64_t from, to;
  int cpu0, cpu1;
};
/* Shared memory, which a copy or concurrent scan does not write-protect:
 * the heartbeat's writes there never wait for the scanner. Its other
 * variables lie in the page of .data the file maps, which no scan protects
 * either (a 96 KiB array in .bss would push them into anonymous memory). */
static struct gap *g_log;
static atomic_ulong g_logged; /* gaps logged since r; the log's slot is this % LOG_MAX */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t next(uint64_t *s) { /* xorshift64 */
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t pick_size(uint64_t *s) {
  if (g_min == g_max) return g_min;
  /* log-uniform: a power of two between min and max, then uniform within it */
  size_t bits_lo = 63 - (size_t)__builtin_clzll(g_min), bits_hi = 63 - (size_t)__builtin_clzll(g_max);
  size_t b = bits_lo + next(s) % (bits_hi - bits_lo + 1);
  size_t base = (size_t)1 << b;
  size_t sz = base + next(s) % base;
  if (sz < g_min) sz = g_min;
  if (sz > g_max) sz = g_max;
  return sz;
}

struct share {
  size_t first, last; /* slots in g_live */
  uint64_t seed;
};

static void *worker(void *arg) {
  struct share *sh = arg;
  uint64_t s = sh->seed;
  size_t per = g_bytes / (size_t)g_threads, made = 0;
  void *prev = NULL;
  size_t slot = sh->first;
  while (made < per && slot < sh->last) {
    size_t sz = pick_size(&s);
    void **b = malloc(sz);
    if (!b) abort();
    memset(b, 0, sz);
    b[0] = prev;
    made += sz;
    if (next(&s) % 1000 == 7) continue; /* dropped: nothing points to it */
    prev = b;
    g_live[slot++] = b;
  }
  sh->last = slot;
  atomic_fetch_add(&g_count, slot - sh->first);
  atomic_fetch_add(&g_made, 1);
  if (sh->first == 0) return NULL; /* the first share's thread is main */
  /* Keep working: write one word of each of this thread's last 256 blocks
   * in turn (a service's hot set: a few pages written all the time). */
  size_t from = sh->last - sh->first > 256 ? sh->last - 256 : sh->first;
  for (size_t i = from;; i = i + 1 < sh->last ? i + 1 : from) {
    void **b = g_live[i];
    if (b) ((volatile uintptr_t *)b)[1] = (uintptr_t)i;
  }
  return NULL;
}

static void *heartbeat(void *arg) {
  (void)arg;
  uint64_t last = now_ns();
  int cpu = sched_getcpu();
  for (;;) {
    uint64_t t = now_ns();
    int now_cpu = sched_getcpu();
    if (atomic_exchange(&g_reset, 0)) {
      atomic_store(&g_gap_ns, 0);
      atomic_store(&g_logged, 0);
    } else {
      if ((long long)(t - last) > atomic_load(&g_gap_ns)) {
        atomic_store(&g_gap_ns, (long long)(t - last));
        atomic_store(&g_gap_at, (long long)t);
      }
      if (t - last >= LOG_NS) {
        unsigned long n = atomic_load(&g_logged);
        g_log[n % LOG_MAX] = (struct gap){last, t, cpu, now_cpu};
        atomic_store(&g_logged, n + 1);
      }
    }
    last = t;
    cpu = now_cpu;
  }
  return NULL;
}

/* Read while the heartbeat may log more: a slot it rewrites meanwhile is
 * one of the oldest, read last of all only if the log wrapped. */
static void print_log(void) {
  unsigned long n = atomic_load(&g_logged), first = n > LOG_MAX ? n - LOG_MAX : 0;
  for (unsigned long i = first; i < n; i++) {
    struct gap g = g_log[i % LOG_MAX];
    printf("%llu %llu %d %d\n", (unsigned long long)g.from, (unsigned long long)g.to, g.cpu0,
           g.cpu1);
  }
  printf("end\n");
}

int main(int argc, char **argv) {
  if (argc != 5) return 2;
  g_bytes = strtoull(argv[1], NULL, 0);
  g_min = strtoull(argv[2], NULL, 0);
  g_max = strtoull(argv[3], NULL, 0);
  g_threads = atoi(argv[4]);
  if (g_threads < 1 || g_min < 16 || g_max < g_min) return 2;
  g_cap = g_bytes / g_min + (size_t)g_threads;
  g_live = calloc(g_cap, sizeof(void *));
  struct share *shares = calloc((size_t)g_threads, sizeof(*shares));
  g_log = mmap(NULL, LOG_MAX * sizeof(*g_log), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
               -1, 0);
  if (!g_live || !shares || g_log == MAP_FAILED) return 2;
  size_t per = g_cap / (size_t)g_threads;
  pthread_t t;
  for (int i = 0; i < g_threads; i++) {
    shares[i] = (struct share){(size_t)i * per, (size_t)(i + 1) * per, 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)};
    if (i) pthread_create(&t, NULL, worker, &shares[i]);
  }
  worker(&shares[0]);
  while (atomic_load(&g_made) < g_threads) usleep(1000);
  pthread_create(&t, NULL, heartbeat, NULL);
  printf("READY %zu\n", atomic_load(&g_count));
  fflush(stdout);
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (line[0] == 'r') {
      atomic_store(&g_reset, 1);
      while (atomic_load(&g_reset)) usleep(100);
      printf("ok\n");
    } else if (line[0] == 'g') {
      printf("gap %lld %lld\n", atomic_load(&g_gap_ns) / 1000, atomic_load(&g_gap_at));
    } else if (line[0] == 'h') {
      print_log();
    } else if (line[0] == 'l') {
      if (!__lsan_do_recoverable_leak_check) {
        printf("lsan none\n");
      } else {
        uint64_t t0 = now_ns();
        int leaked = __lsan_do_recoverable_leak_check();
        printf("lsan %llu %d\n", (unsigned long long)((now_ns() - t0) / 1000), leaked);
      }
    }
    fflush(stdout);
  }
  return 0;
}
