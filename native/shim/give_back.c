/*
 * Giving the size maps' pages back when the heap shrinks. A map page (4 KiB:
 * 64 KiB of heap in level 0, 512 KiB in level 1) that holds no entry covers
 * no live block;
 * once glibc has returned that heap to the kernel, nothing will be
 * registered there for a while, and the page is only memory kept for
 * nothing, as is one whose blocks were freed into glibc's bins. The helper
 * thread looks every UR_GIVE_BACK_PERIOD_NS (a read of /proc/self/statm, a
 * sample of 64 map pages) and makes a pass over the maps when they may be
 * a fifth of the process's resident memory (in a live heap they are 7% of
 * its span at most), when the process shrank by an eighth since
 * the last pass, or when a quarter of the sample is empty; a pass gives
 * back every resident map page that holds no entry. Passes that give back
 * little make the next wait longer.
 *
 * An entry is written by the thread that glibc handed the block to, after
 * glibc returned and before it leaves its announced operation; a page found
 * empty could get one between the look and the madvise, and the entry would
 * be lost. So the pages are found without stopping anyone, then checked
 * again and dropped behind the gate malloc_disable uses: every entry point
 * waits at it, and threads already inside one are waited out. That wait is
 * bounded: a thread that does not come out (stopped by a debugger inside
 * malloc, or a signal handler allocating over an interrupted malloc, which
 * would wait at the gate behind its own operation) makes this round give
 * up and open the gate again.
 */
#include "give_back.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "between_calls.h"
#include "lock.h"
#include "size_map.h"
#include "threads.h"

#define BATCH 256                        /* maps checked per closing of the gate */
#define QUIESCENT_WAIT_NS 50000000ull    /* 50 ms */
#define MIN_DROP ((uint64_t)4 << 20)     /* resident bytes */
#define MIN_MAPS ((uint64_t)1 << 20)     /* map bytes worth a pass */
#define MIN_GATED_PAGES 16u              /* empty map pages worth closing the gate for */

/* What the last pass saw: the maps listed then, and their pages still
 * resident after it. Maps listed since count whole. */
static uint64_t seen_maps, seen_resident;
static uint64_t peak;        /* the process's resident bytes, the most seen since the last pass */
static uint64_t next_pass;   /* no pass before this (now_ns), after passes that gave little */
static unsigned idle_passes; /* such passes in a row: the wait doubles with each */
static uint64_t seed = 0x9E3779B97F4A7C15ull;

#define SAMPLES 64

/* Whether a quarter of a sample of the maps' resident pages hold no entry:
 * a heap glibc keeps (small blocks freed into its bins, which it does not
 * return) leaves empty pages without the process shrinking. */
static int sample_empty(uint64_t listed) {
  unsigned resident = 0, empty = 0;
  for (unsigned i = 0; i < SAMPLES; i++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    int e = ur_size_map_page_empty(seed % listed, (unsigned)(seed >> 32) % UR_SIZE_MAP_PAGES);
    if (e < 0) continue;
    resident++;
    empty += (unsigned)e;
  }
  return resident && empty * 4 >= resident;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The process's resident bytes (/proc/self/statm), 0 if unknown. */
static uint64_t resident(void) {
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  unsigned long long size = 0, res = 0;
  const char *p = buf;
  for (; *p >= '0' && *p <= '9'; p++) size = size * 10 + (unsigned)(*p - '0');
  for (p++; *p >= '0' && *p <= '9'; p++) res = res * 10 + (unsigned)(*p - '0');
  (void)size;
  return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Close the gate (malloc_disable's, without its shard locks: the maps need
 * none) and wait out the threads inside an entry point. 0: closed; -1: a
 * thread stayed inside (open it again); -2: not closed. */
static int gate_close(uint32_t tid) {
  ur_lock_hard(&ur_g.disable_lock, tid);
  /* A fork in progress holds every lock as excl_tid: not now. */
  uint32_t none = 0;
  if (!__atomic_compare_exchange_n(&ur_fork->excl_tid, &none, tid, 0, __ATOMIC_SEQ_CST,
                                   __ATOMIC_SEQ_CST)) {
    ur_unlock(&ur_g.disable_lock, 1);
    return -2;
  }
  __atomic_fetch_or(&ur_g.slow, UR_SLOW_GATE, __ATOMIC_SEQ_CST);
  /* Entry points announce, then read the gate, with no fence between. */
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  uint64_t deadline = now_ns() + QUIESCENT_WAIT_NS;
  uint32_t hw = ur_threads_high_water();
  uint32_t gen = ur_calls_wait_begin();
  int r = 0;
  for (uint32_t i = 0; i < hw && r == 0; i++) {
    struct ur_thread_slot *s = &ur_g.threads[i];
    unsigned looks = 0;
    while (r == 0 && ur_slot_in_call(s) && !ur_calls_seen_between(s, gen)) {
      if (now_ns() > deadline) r = -1;
      else ur_wait_a_turn(&looks);
    }
  }
  ur_calls_wait_end();
  return r;
}

static void gate_open(uint32_t tid) {
  __atomic_compare_exchange_n(&ur_fork->excl_tid, &tid, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  __atomic_fetch_and(&ur_g.slow, ~UR_SLOW_GATE, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &ur_g.slow, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
  ur_unlock(&ur_g.disable_lock, 1);
}

struct found {
  uint64_t ref;
  uint32_t pages;
};

static unsigned pages_in(const struct found *found, unsigned k) {
  unsigned n = 0;
  for (unsigned i = 0; i < k; i++) n += (unsigned)__builtin_popcount(found[i].pages);
  return n;
}

size_t ur_give_back_now(uint64_t *left) {
  /* Threads with no slot of their own (past UR_MAX_THREADS) announce
   * nowhere: they could not be waited out. Nor could anyone without the
   * membarrier that single-thread mode needs. */
  if (left) *left = 0;
  if (!ur_g.bias_ok) return 0;
  uint32_t tid = ur_self_tid();
  size_t given = 0, resident_maps = 0;
  uint64_t n = ur_size_maps_listed();
  struct found found[BATCH];
  for (uint64_t r = 0; r < n;) {
    unsigned k = 0;
    for (; r < n && k < BATCH; r++) {
      size_t res;
      uint32_t pages = ur_size_map_empty_pages(r, &res);
      resident_maps += res;
      if (pages) found[k].ref = r, found[k++].pages = pages;
    }
    if (pages_in(found, k) < MIN_GATED_PAGES) continue; /* not worth stopping anyone */
    int closed = gate_close(tid);
    if (closed == 0)
      for (unsigned i = 0; i < k; i++) given += ur_size_map_release_pages(found[i].ref, found[i].pages);
    else
      r = n; /* someone stays inside, or a fork: another time */
    if (closed != -2) gate_open(tid);
  }
  if (left) *left = resident_maps > given ? resident_maps - given : 0;
  return given;
}

void ur_give_back_step(void) {
  if (ur_load32(&ur_g.slow) & (UR_SLOW_INERT | UR_SLOW_UNINIT)) return;
  uint64_t listed = ur_size_maps_listed();
  if (!listed) return;
  uint64_t rss = resident(), now = now_ns();
  if (!rss || now < next_pass) return;
  if (rss > peak) peak = rss;
  /* A pass when the maps may be a fifth of what is resident (7% of a live
   * heap's span is their most), when the process shrank by an
   * eighth since the last one, or when a sample finds many empty pages. */
  uint64_t maps = seen_resident + (listed - seen_maps) * UR_SIZE_MAP_ALLOC;
  int shrank = rss + (peak / 8 > MIN_DROP ? peak / 8 : MIN_DROP) <= peak;
  if (listed * UR_SIZE_MAP_ALLOC < MIN_MAPS) return; /* too few to matter */
  if (!shrank && maps * 5 < rss && !sample_empty(listed)) return;
  uint64_t left;
  size_t given = ur_give_back_now(&left);
  seen_maps = listed;
  seen_resident = left;
  peak = resident();
  /* A pass that found little: the next waits longer (up to 64 periods). */
  idle_passes = given >= MIN_MAPS ? 0 : idle_passes < 6 ? idle_passes + 1 : 6;
  next_pass = now + (idle_passes ? (UR_GIVE_BACK_PERIOD_NS << idle_passes) : 0);
}
