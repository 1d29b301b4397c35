/*
 * The in-child sweep, as libmemunreachable sweeps inside its forked child:
 * the copy-on-write child reads the heap and the registry as its own memory,
 * with plain loads, where the scanner would copy them through /proc/PID/mem.
 * Protocol: abi.h (struct ur_child_box). Mark and fold are the scanner's code
 * (native/mark/), compiled in here.
 *
 * What code here may do. Threads of the target were stopped at arbitrary
 * instructions when the helper cloned, and the child has only the helper's
 * thread: glibc's and the shim's locks may be held forever. So: no malloc, no
 * stdio, no shim lock, no libc wrapper that can set errno (errno lives in the
 * helper's TLS, a root; native/mark/raw_syscall.h); memory comes from mmap
 * (native/mark/alloc.c). The registry is walked lock-free exactly as the
 * external reader does (native/mark/registry_walk.h). The child runs on a
 * stack of its own, so nothing it computes lands in a root (the helper's
 * stack is one), and all of it is iterative. Heap memory is loaded directly
 * only inside the ranges the scanner listed readable; SIGSEGV/SIGBUS on such
 * a load (a file truncated under a mapping) maps a zero page there and
 * counts it, as /proc/PID/mem would have read it as zero.
 */
#include "child.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "alloc.h"
#include "entry_order.h"
#include "heap_walker.h"
#include "mem_direct.h"
#include "raw_syscall.h"
#include "raw_thread.h"
#include "region.h"
#include "registry_walk.h"
#include "state.h"
#include "sweep_core.h"

#define CHILD_STACK ((size_t)1 << 20)
#define INBOX_CAP ((uint64_t)1 << 30) /* reserved, touched only by the scanner's writes */

struct ur_child_box ur_child_box;

static struct {
  uint64_t *pairs; /* registry entries in walk order: (begin, size) */
  uint32_t *ids;   /* their stack ids */
  size_t n;
  struct ur_walker w;
  int indexed, swept;
  struct ur_direct_mem dm;
  int dm_open;
  struct ur_direct_mem team_dm[UR_CHILD_MAX_THREADS - 1]; /* the other marking threads' */
  struct ur_child_index index_reply;
  uint8_t *reply;
  size_t reply_len;
} st;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A ptrace signal-delivery-stop; the scanner resumes us with no signal. */
static void stop_for_scanner(void) {
  long pid = ur_sys0(SYS_getpid);
  ur_sys2(SYS_kill, pid, SIGSTOP);
}

__attribute__((noreturn)) static void die(void) {
  for (;;) ur_sys1(SYS_exit_group, 0);
}

/* Whether [addr, addr + len) lies in the shim's region. */
static int in_region(uint64_t addr, uint64_t len) { return ur_region_contains(addr, len); }

/* st.pairs and st.ids with room for want entries (*room of them now). */
static int reserve_entries(size_t *room, size_t want) {
  if (want <= *room) return 0;
  size_t grown = 2 * *room > want ? 2 * *room : want;
  uint64_t *pairs = ur_big_realloc(st.pairs, 2 * grown * sizeof(*st.pairs));
  if (!pairs) return -ENOMEM;
  st.pairs = pairs;
  uint32_t *ids = ur_big_realloc(st.ids, grown * sizeof(*st.ids));
  if (!ids) return -ENOMEM;
  st.ids = ids;
  *room = grown;
  return 0;
}

/* The registry, read as the external reader reads it, then sorted. */
static int build_index(void) {
  uint64_t t0 = now_ns();
  const struct ur_descriptor *d = &unreachable_descriptor;
  const struct ur_shard *shards = (const struct ur_shard *)(uintptr_t)d->shards;
  uint32_t nshards = shards ? d->num_shards : 0;
  if (nshards && !in_region(d->shards, (uint64_t)nshards * sizeof *shards)) return -EUCLEAN;
  /* Room for every slot of every table: reserved, only what is written is
   * touched (the maps' entries get theirs as they are read). */
  size_t room = 0;
  for (uint32_t s = 0; s < nshards; s++) {
    uint64_t table, cap;
    if (ur_registry_table(&shards[s], &table, &cap)) room += cap;
  }
  /* Maps and their list live in the shim's region; anything else is not
   * read. */
  const struct ur_size_maps *maps = (const struct ur_size_maps *)(uintptr_t)d->size_maps;
  uint64_t nrefs = 0;
  const struct ur_size_map_ref *refs = NULL;
  if (maps && in_region(d->size_maps, sizeof *maps) && maps->count <= UR_SIZE_MAP_MAX_REFS &&
      in_region(maps->refs, maps->count * sizeof *refs)) {
    refs = (const struct ur_size_map_ref *)(uintptr_t)maps->refs;
    nrefs = maps->count;
  } else if (maps && in_region(d->size_maps, sizeof *maps) && maps->count) {
    return -EUCLEAN; /* a list moved out of the region: its blocks would be lost */
  }
  /* A registry the process overwrote is not read (entry_order.h): its
   * forged pieces would multiply this child's work and make up blocks
   * (as would shards outside the shim's region, checked first). */
  int forged = ur_registry_forged(shards, nshards, refs, nrefs);
  if (forged) return forged < 0 ? forged : -EUCLEAN;
  if (!room) room = 1;
  st.pairs = ur_big_calloc(2 * room, sizeof(*st.pairs));
  st.ids = ur_big_calloc(room, sizeof(*st.ids));
  if (!st.pairs || !st.ids) return -ENOMEM;
  /* The maps by base first: their entries then come in address order, and
   * only the shards' (after them) need sorting (entry_order.h). */
  size_t n = 0, shard_room = room;
  uint32_t *order;
  if (ur_size_map_order(refs, nrefs, &order)) return -ENOMEM;
  int rc = 0;
  for (uint64_t k = 0; k < nrefs; k++) {
    const struct ur_size_map_ref *ref = &refs[order[k]];
    if (!in_region(ref->map, UR_SIZE_MAP_BYTES)) continue;
    /* Room for a whole map, grown as the maps are read (mremap: nothing is
     * copied) rather than counted by reading every map once more first. */
    if ((rc = reserve_entries(&room, n + UR_SIZE_MAP_MAX_LIVE)) != 0) break;
    /* A map's blocks have stack id 0, and st.ids is zero where nothing was
     * written (fresh memory, grown by mremap): not written, which spares
     * the child 4 bytes of page faults per block. */
    n += ur_size_map_collect((const void *)(uintptr_t)ref->map, ref->base, st.pairs + 2 * n,
                             NULL);
  }
  ur_big_free(order);
  if (!rc) rc = reserve_entries(&room, n + shard_room);
  if (rc) return rc;
  size_t from_maps = n;
  for (uint32_t s = 0; s < nshards; s++) {
    uint64_t table, cap;
    if (!ur_registry_table(&shards[s], &table, &cap)) continue;
    /* Shard tables live in the shim's region; anything else is not read. */
    if (!in_region(table, cap * sizeof(struct ur_entry))) continue;
    n += ur_registry_collect((const struct ur_entry *)(uintptr_t)table, (size_t)cap,
                          st.pairs + 2 * n, st.ids + n);
  }
  st.n = n;
  /* With every block in the shards (backtraces) nothing is in order yet:
   * the walker's own sort then takes less memory than sorting here. */
  rc = from_maps ? ur_entries_order_maps_first(st.pairs, st.ids, n, from_maps) : 0;
  if (!rc) rc = ur_walker_init(&st.w, &st.dm.mem, st.pairs, n, UR_SIZES_REQUESTED);
  if (rc) return rc;
  st.indexed = 1;
  st.index_reply = (struct ur_child_index){
      .entries = n,
      .allocation_count = st.w.distinct,
      .allocation_bytes = st.w.distinct_bytes,
      .overlapping = st.w.overlapping,
      .index_ns = now_ns() - t0,
      .features = UR_CHILD_FEATURE_TEAM | UR_CHILD_FEATURE_TEAM_SIZE | UR_CHILD_FEATURE_BLOCKS |
                  UR_CHILD_FEATURE_OWNED,
  };
  return 0;
}

static void *new_reply(size_t len) {
  ur_big_free(st.reply);
  st.reply = ur_big_calloc(len ? len : 1, 1);
  st.reply_len = st.reply ? len : 0;
  return st.reply;
}

/* The index of the first block beginning at or above addr. */
static size_t first_at(uint64_t addr) {
  size_t lo = 0, hi = st.w.n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ur_walker_begin(&st.w, mid) < addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int serve_holds(const uint8_t *in, uint64_t len) {
  if (len % 16) return -EINVAL;
  size_t n = (size_t)(len / 16);
  uint8_t *out = new_reply(n);
  if (!out) return -ENOMEM;
  const uint64_t *r = (const uint64_t *)in;
  for (size_t i = 0; i < n; i++) {
    size_t lo = first_at(r[2 * i]);
    out[i] = lo < st.w.n && ur_walker_begin(&st.w, lo) < r[2 * i + 1];
  }
  return 0;
}

static int serve_blocks(const uint8_t *in, uint64_t len) {
  if (len < 8 || (len - 8) % 16) return -EINVAL;
  const uint64_t *r = (const uint64_t *)in;
  uint64_t cap = r[0];
  size_t n = (size_t)((len - 8) / 16);
  r++;
  uint64_t listed = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t b = r[2 * i], e = r[2 * i + 1];
    size_t count = b < e ? first_at(e) - first_at(b) : 0;
    listed += count < cap ? count : cap;
  }
  uint64_t *out = new_reply((n + listed) * 8);
  if (!out) return -ENOMEM;
  uint64_t *addrs = out + n;
  for (size_t i = 0; i < n; i++) {
    uint64_t b = r[2 * i], e = r[2 * i + 1];
    size_t first = first_at(b);
    size_t count = b < e ? first_at(e) - first : 0;
    out[i] = count;
    for (size_t k = 0; k < count && k < cap; k++) *addrs++ = ur_walker_begin(&st.w, first + k);
  }
  return 0;
}

/* CPUs this process may run on (1 if unknown). */
static unsigned allowed_cpus(void) {
  uint64_t mask[16] = {0}; /* 1024 CPUs */
  long got = ur_sys3(SYS_sched_getaffinity, 0, sizeof(mask), mask);
  if (ur_sys_failed(got)) return 1;
  unsigned n = 0;
  for (long i = 0; i < got / 8; i++) n += (unsigned)__builtin_popcountll(mask[i]);
  return n ? n : 1;
}

static int serve_sweep(const uint8_t *in, uint64_t len) {
  if (st.swept) return -EALREADY; /* the marks are spent */
  struct ur_child_sweep_req q;
  if (len < sizeof(q)) return -EINVAL;
  memcpy(&q, in, sizeof(q));
  uint64_t words = 2 * q.nranges + q.nvalues + q.nexcluded + 2 * q.nreadable;
  if (q.nranges > len || q.nvalues > len || q.nexcluded > len || q.nreadable > len)
    return -EINVAL;
  uint64_t base = sizeof(q) + 8 * words;
  struct ur_child_sweep_opts opts = {.threads = 1};
  if (len == base + sizeof(opts)) memcpy(&opts, in + base, sizeof(opts));
  else if (len != base) return -EINVAL;
  if (opts.threads < 1 || opts.threads > UR_CHILD_MAX_THREADS) return -EINVAL;
  const uint64_t *p = (const uint64_t *)(in + sizeof(q));
  struct ur_sweep_in si = {
      .ranges = p,
      .nranges = (size_t)q.nranges,
      .values = p + 2 * q.nranges,
      .nvalues = (size_t)q.nvalues,
      .excluded = p + 2 * q.nranges + q.nvalues,
      .nexcluded = (size_t)q.nexcluded,
      .stack_ids = st.ids,
  };
  const uint64_t *readable = p + 2 * q.nranges + q.nvalues + q.nexcluded;
  int rc = ur_direct_open(&st.dm, readable, (size_t)q.nreadable);
  if (rc) return rc;
  st.dm_open = 1;
  ur_direct_catch_faults(&st.dm);
  st.swept = 1;
  /* Each marking thread reads through a backend of its own; one that cannot
   * have one is not started. No more threads than CPUs we may run on (the
   * target's affinity, inherited): more would only wait for each other. */
  struct ur_mem *mems[UR_CHILD_MAX_THREADS] = {&st.dm.mem};
  unsigned threads = 1, want = allowed_cpus();
  if (want > opts.threads) want = (unsigned)opts.threads;
  while (threads < want &&
         ur_direct_open(&st.team_dm[threads - 1], readable, (size_t)q.nreadable) == 0) {
    mems[threads] = &st.team_dm[threads - 1].mem;
    threads++;
  }
  struct ur_raw_threads team = {.n = 0};
  const struct ur_team_ops ops = {ur_raw_thread_start, ur_raw_thread_join, &team};
  si.threads = threads;
  si.mems = mems;
  si.team = &ops;
  struct ur_sweep_out out;
  rc = ur_sweep_run(&st.w, &si, 0, now_ns, &out);
  uint64_t skipped = st.dm.mem.pages_skipped, bounced = st.dm.bounced;
  for (unsigned k = 1; k < threads; k++) {
    skipped += st.team_dm[k - 1].mem.pages_skipped;
    bounced += st.team_dm[k - 1].bounced;
    ur_direct_close(&st.team_dm[k - 1]);
  }
  if (rc) return rc;
  struct ur_child_sweep_reply h = {
      .unreachable_count = out.unreachable_count,
      .unreachable_bytes = out.unreachable_bytes,
      .bytes_scanned = out.bytes_scanned,
      .pages_skipped = skipped,
      .mark_ns = out.mark_ns,
      .fold_ns = out.fold_ns,
      .nleaks = out.nleaks,
      .bounced_pages = bounced,
  };
  size_t body = out.nleaks * sizeof(struct ur_leak_record);
  uint64_t team_size = st.w.marked_by;
  uint8_t *r = new_reply(sizeof(h) + body + sizeof(team_size));
  if (r) {
    memcpy(r, &h, sizeof(h));
    if (body) memcpy(r + sizeof(h), out.leaks, body);
    memcpy(r + sizeof(h) + body, &team_size, sizeof(team_size));
  }
  ur_sweep_out_free(&out);
  return r ? 0 : -ENOMEM;
}

__attribute__((noreturn)) static void child_main(void) {
  struct ur_child_box *b = &ur_child_box;
  void *inbox = ur_small_reserve(INBOX_CAP);
  int rc = inbox ? build_index() : -ENOMEM;
  b->in = (uint64_t)(uintptr_t)inbox;
  b->in_cap = inbox ? INBOX_CAP : 0;
  b->out = (uint64_t)(uintptr_t)&st.index_reply;
  b->out_len = rc ? 0 : sizeof(st.index_reply);
  b->error = rc;
  __atomic_store_n(&b->state, rc ? UR_CHILD_FAILED : UR_CHILD_INDEXED, __ATOMIC_RELEASE);
  for (;;) {
    stop_for_scanner();
    uint32_t req = __atomic_exchange_n(&b->request, UR_CHILD_REQ_NONE, __ATOMIC_ACQ_REL);
    uint64_t len = b->in_len;
    b->state = UR_CHILD_BUSY;
    if (req == UR_CHILD_REQ_NONE) continue; /* a stray resume */
    if (!inbox || len > INBOX_CAP) {
      rc = -EINVAL;
    } else if (!st.indexed) {
      rc = b->error ? b->error : -EINVAL;
    } else if (req == UR_CHILD_REQ_HOLDS) {
      rc = serve_holds(inbox, len);
    } else if (req == UR_CHILD_REQ_BLOCKS) {
      rc = serve_blocks(inbox, len);
    } else if (req == UR_CHILD_REQ_SWEEP) {
      rc = serve_sweep(inbox, len);
    } else {
      die();
    }
    b->out = (uint64_t)(uintptr_t)st.reply;
    b->out_len = rc ? 0 : st.reply_len;
    b->error = rc;
    __atomic_store_n(&b->state, rc ? UR_CHILD_FAILED : UR_CHILD_REPLIED, __ATOMIC_RELEASE);
  }
}

__attribute__((noreturn)) static void run_on_stack(void *top, void (*fn)(void)) {
#if defined(__x86_64__)
  __asm__ volatile("mov %0, %%rsp\n\txor %%ebp, %%ebp\n\tcall *%1\n\tud2"
                   :
                   : "r"(top), "r"(fn)
                   : "memory");
#elif defined(__aarch64__)
  __asm__ volatile("mov sp, %0\n\tmov x29, xzr\n\tblr %1\n\tbrk #0" : : "r"(top), "r"(fn) : "memory");
#else
#error "unsupported architecture"
#endif
  __builtin_unreachable();
}

void ur_child_run(void) {
  if (__atomic_load_n(&ur_child_box.go, __ATOMIC_ACQUIRE) != UR_CHILD_GO) return;
  /* A session of its own, so an autogroup of its own where the kernel groups
   * by session (docs/pause.md, "CPU share"): the sweep then shares the CPU
   * with the target's threads as one group against another, where in the
   * target's group each of the target's busy threads would take as much as
   * each marking thread. A failure (a seccomp filter's errno; the child is
   * no group leader, so nothing else) leaves the child in the target's
   * session; a filter that kills the call ends the child, and the scan
   * falls back as for any other call of the child's a filter stops. */
  ur_sys0(SYS_setsid);
  long stack = ur_sys6(SYS_mmap, 0, (long)CHILD_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (ur_sys_failed(stack)) {
    ur_child_box.error = (int32_t)stack;
    __atomic_store_n(&ur_child_box.state, UR_CHILD_FAILED, __ATOMIC_RELEASE);
    stop_for_scanner();
    return;
  }
  run_on_stack((uint8_t *)stack + CHILD_STACK, child_main);
}
