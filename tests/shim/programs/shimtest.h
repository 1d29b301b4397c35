/* Helpers for programs run under the shim: find it through dlsym (the
 * programs are not linked against it) and read its registry directly, the
 * way the scanner does. */
#ifndef SHIMTEST_H
#define SHIMTEST_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unreachable/abi.h"
#include "unreachable/malloc_debug.h"

#define CHECK(cond)                                                               \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static inline void *shim_sym(const char *name) {
  void *p = dlsym(RTLD_DEFAULT, name);
  if (!p) {
    fprintf(stderr, "symbol %s not found (shim not preloaded?)\n", name);
    exit(2);
  }
  return p;
}

static inline struct ur_descriptor *shim_desc(void) {
  return (struct ur_descriptor *)shim_sym(UR_DESCRIPTOR_SYMBOL);
}

#define SHIM_FN(name) ((__typeof__(&name))shim_sym(#name))

/* Shard i's lock word: apart from the shards where the shim says so.
 * No dlsym: signal handlers call it (d from shim_desc() beforehand). */
static inline uint32_t *shim_shard_lock(const struct ur_descriptor *d, unsigned i) {
  if (d->shard_locks) return &((uint32_t *)(uintptr_t)d->shard_locks)[i];
  return &((struct ur_shard *)(uintptr_t)d->shards)[i].lock;
}

/* Whether the block at a is in a size map, and its size there (read as the
 * scanner reads them: the list of refs, not the shim's directory). */
static inline int size_map_entry(uint64_t a, uint64_t *size) {
  struct ur_descriptor *d = shim_desc();
  const struct ur_size_maps *m = (const struct ur_size_maps *)(uintptr_t)d->size_maps;
  if (!m || !m->refs || (a & 15)) return 0;
  const struct ur_size_map_ref *refs = (const struct ur_size_map_ref *)(uintptr_t)m->refs;
  for (uint64_t i = 0; i < m->count; i++) {
    uint64_t base = refs[i].base;
    if (base != (a & ~((UINT64_C(1) << UR_SIZE_MAP_SPAN_SHIFT) - 1))) continue;
    const uint8_t *map = (const uint8_t *)(uintptr_t)refs[i].map;
    uint32_t i0 = (uint32_t)((a - base) >> UR_SIZE_MAP_L0_SHIFT);
    uint32_t i1 = (uint32_t)((a - base) >> UR_SIZE_MAP_L1_SHIFT);
    uint32_t i2 = (uint32_t)((a - base) >> UR_SIZE_MAP_L2_SHIFT);
    uint16_t v1 = ((const uint16_t *)(const void *)(map + UR_SIZE_MAP_L1_OFFSET))[i1];
    uint32_t v2 = ((const uint32_t *)(const void *)(map + UR_SIZE_MAP_L2_OFFSET))[i2];
    if (map[i0]) {
      if (size) *size = ur_size_map_l0_size(map[i0]);
      return 1;
    }
    if (v1 && ur_size_map_l1_block(base, i1, v1) == a) {
      if (size) *size = ur_size_map_l1_size(v1);
      return 1;
    }
    if (v2 && ur_size_map_l2_block(base, i2, v2) == a) {
      if (size) *size = ur_size_map_l2_size(v2);
      return 1;
    }
  }
  return 0;
}

/* p's entry in a shard, or NULL. */
static inline const struct ur_entry *shard_entry(uint64_t a) {
  struct ur_descriptor *d = shim_desc();
  struct ur_shard *shards = (struct ur_shard *)(uintptr_t)d->shards;
  uint64_t key = UR_MANGLE(a);
  for (uint32_t i = 0; i < d->num_shards; i++) {
    struct ur_entry *t = (struct ur_entry *)(uintptr_t)shards[i].table;
    for (uint64_t j = 0; j < shards[i].capacity; j++)
      if (t[j].key == key) return &t[j];
  }
  return NULL;
}

/* Look p up like the scanner: returns 1 and the entry if p is live. (p's
 * bytes are never read: always_inline keeps GCC from assuming they are.) */
/* The shard whose table holds p's entry, or -1. */
static inline int shard_of(const void *p) {
  const struct ur_entry *e = shard_entry((uint64_t)(uintptr_t)p);
  struct ur_descriptor *d = shim_desc();
  const struct ur_shard *shards = (const struct ur_shard *)(uintptr_t)d->shards;
  for (uint32_t i = 0; e && i < d->num_shards; i++) {
    const struct ur_entry *t = (const struct ur_entry *)(uintptr_t)shards[i].table;
    if (e >= t && e < t + shards[i].capacity) return (int)i;
  }
  return -1;
}

static inline __attribute__((always_inline)) int registry_find(const void *p, uint64_t *size,
                                                               uint32_t *stack_id) {
  if (size_map_entry((uint64_t)(uintptr_t)p, size)) {
    if (stack_id) *stack_id = 0;
    return 1;
  }
  const struct ur_entry *e = shard_entry((uint64_t)(uintptr_t)p);
  if (!e) return 0;
  if (size) *size = UR_META_SIZE(e->meta);
  if (stack_id) *stack_id = UR_META_STACK_ID(e->meta);
  return 1;
}

static inline __attribute__((always_inline)) int registered_with_size(const void *p,
                                                                      uint64_t want) {
  uint64_t size = UINT64_MAX;
  return registry_find(p, &size, NULL) && size == want;
}

/* This thread's slot, found by tid. */
static inline struct ur_thread_slot *my_slot(void) {
  struct ur_descriptor *d = shim_desc();
  struct ur_thread_slot *s = (struct ur_thread_slot *)(uintptr_t)d->threads;
  uint32_t tid = (uint32_t)gettid();
  for (uint32_t i = 0; i < d->max_threads; i++)
    if (s[i].tid == tid && s[i].state == UR_THREAD_LIVE) return &s[i];
  return NULL;
}

/* The shim's code, [*lo, *hi): where a signal handler's interrupted pc
 * says the thread was inside the shim. */
#include <link.h>
static int shim_text_in_(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t *range = (uintptr_t *)arg;
  Dl_info where;
  if (!dladdr(shim_desc(), &where) || !where.dli_fname || strcmp(info->dlpi_name, where.dli_fname))
    return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      range[0] = info->dlpi_addr + ph->p_vaddr;
      range[1] = range[0] + ph->p_memsz;
    }
  }
  return 1;
}
static inline void shim_text(uintptr_t *lo, uintptr_t *hi) {
  uintptr_t range[2] = {0, 0};
  dl_iterate_phdr(shim_text_in_, range);
  *lo = range[0];
  *hi = range[1];
}

/* SIGALRM to fn (SA_SIGINFO) every 100 microseconds of real time. */
#include <signal.h>
#include <sys/time.h>
static inline void every_100us(void (*fn)(int, siginfo_t *, void *)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fn;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 100}, {0, 100}};
  setitimer(ITIMER_REAL, &it, NULL);
}

/* Ends every_100us's timer. */
static inline void stop_timer(void) {
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
}

/* malloc and free of size bytes back to back, fn ticking every 100 us,
 * until *hits reaches want or seconds have passed (the clock read every
 * 4096 calls); the timer is stopped after. */
#include <time.h>
static inline void churn_until_hits(void (*fn)(int, siginfo_t *, void *), size_t size,
                                    volatile long *hits, long want, long seconds) {
  every_100us(fn);
  time_t end = time(NULL) + seconds;
  for (long i = 0; *hits < want && (i & 0xfff || time(NULL) < end); i++) {
    void *volatile q = malloc(size);
    free(q);
  }
  stop_timer();
}

/* For a handler that acts only where it interrupted one of its thread's
 * calls, inside the shim's code: the thread's slot and that code, taken by
 * watch_calls_every_100us on the thread the timer then interrupts. */
#include <ucontext.h>
static struct ur_thread_slot *shimtest_mine_;
static uintptr_t shimtest_text_lo_, shimtest_text_hi_;

/* every_100us(fn), once the calling thread's slot and the shim's code are
 * known; 0 where they are not. */
static inline int watch_calls_every_100us(void (*fn)(int, siginfo_t *, void *)) {
  shimtest_mine_ = my_slot();
  shim_text(&shimtest_text_lo_, &shimtest_text_hi_);
  if (!shimtest_mine_ || shimtest_text_hi_ <= shimtest_text_lo_) return 0;
  every_100us(fn);
  return 1;
}

/* Whether the handler's context is inside the shim's code during a call
 * its thread announced. */
static inline int landed_in_a_call(const void *context) {
  uintptr_t pc = (uintptr_t)((const ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
  return pc >= shimtest_text_lo_ && pc < shimtest_text_hi_ &&
         __atomic_load_n(&shimtest_mine_->op, __ATOMIC_RELAXED) != UR_OP_NONE;
}

/* Starts a thread that allocates once and then sleeps for ever, SIGALRM
 * blocked in it so the timer interrupts only the caller's thread; returns
 * once it has allocated, the shim then out of single-thread mode (whose
 * thread marks no shard it is inside). 0 if it could not be started. */
#include <pthread.h>
#include <sched.h>
static int shimtest_attached_;
static void *shimtest_idle_(void *arg) {
  (void)arg;
  void *volatile p = malloc(1); /* volatile: not elided */
  free(p);
  __atomic_store_n(&shimtest_attached_, 1, __ATOMIC_RELEASE);
  for (;;) pause();
  return NULL;
}

static inline int start_idle_thread(void) {
  sigset_t alarm, old;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm, &old);
  pthread_t t;
  int ok = pthread_create(&t, NULL, shimtest_idle_, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  while (ok && !__atomic_load_n(&shimtest_attached_, __ATOMIC_ACQUIRE)) sched_yield();
  return ok;
}

#endif
