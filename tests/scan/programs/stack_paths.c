/* 2^DEPTH leaks, each from its own stack: main calls f0 or f1 as the
 * lowest bit of i says, each of them calls f0 or f1 as the next bit says,
 * DEPTH deep, and the innermost allocates 24 bytes and drops them. So the
 * leaks' frames named f0 or f1 spell every DEPTH-bit pattern once, and the
 * shim's stack table holds thousands of stacks, in several of its
 * segments (abi.h).
 *
 * usage: stack_paths DEPTH [LIMIT_MIB [SPARE_KIB]]
 * With LIMIT_MIB the program lowers its RLIMIT_AS to that after its start
 * (vsftpd's session child sets 200 MiB), then maps 64 MiB and starts a
 * thread, as it would. With SPARE_KIB too it then takes the address space
 * that is left but that much, so the shim's table cannot grow far.
 * READY gives leak_count, failed (mallocs that returned NULL) and what the shim's table says: stacks (ids
 * handed out) and dropped (allocations it kept no stack for). */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "scenario.h"
#include "unreachable/abi.h"

static unsigned failed; /* allocations that failed: none, if the test left room */

__attribute__((noinline)) static unsigned leak(void) {
  void *p = malloc(24);
  KEEP(p);
  return p == NULL;
}

void f0(unsigned bits, int depth);
void f1(unsigned bits, int depth);

#define NEXT(bits, depth)            \
  do {                               \
    if ((depth) == 0)                \
      failed += leak();              \
    else if ((bits) & 1)             \
      f1((bits) >> 1, (depth) - 1);  \
    else                             \
      f0((bits) >> 1, (depth) - 1);  \
    __asm__ volatile("" ::: "memory"); /* not a tail call: a frame each */ \
  } while (0)

__attribute__((noinline)) void f0(unsigned bits, int depth) { NEXT(bits, depth); }
__attribute__((noinline)) void f1(unsigned bits, int depth) { NEXT(bits, depth); }

static void *idle(void *arg) { return arg; }

static int live_under(long limit_mib) {
  struct rlimit rl = {(rlim_t)limit_mib << 20, (rlim_t)limit_mib << 20};
  if (setrlimit(RLIMIT_AS, &rl) != 0) return 10;
  void *m = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("mmap under the limit");
    return 11;
  }
  munmap(m, 64 << 20);
  pthread_t t;
  if (pthread_create(&t, NULL, idle, NULL) != 0 || pthread_join(t, NULL) != 0) return 12;
  return 0;
}

/* Maps what is left of the address space but spare_kib, once the heap has
 * room for the leaks to come (kept by glibc, with the shim's size maps for
 * it made): what is left is for the shim's stack table alone. */
static void take_all_but(long spare_kib) {
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  static void *room[4096];
  for (int i = 0; i < 4096; i++) room[i] = malloc(1000);
  for (int i = 0; i < 4096; i++) free(room[i]);
  memset(room, 0, sizeof room); /* the leaks will be where they were */
  size_t spare = (size_t)spare_kib << 10;
  void *kept = mmap(NULL, spare, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  for (size_t step = (size_t)1 << 30; step >= 64 << 10; step /= 2)
    while (mmap(NULL, step, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) !=
           MAP_FAILED) {
    }
  if (kept != MAP_FAILED) munmap(kept, spare);
}

int main(int argc, char **argv) {
  int depth = argc > 1 ? atoi(argv[1]) : 14;
  if (argc > 2) {
    int rc = live_under(atol(argv[2]));
    if (rc) return rc;
  }
  if (argc > 3) take_all_but(atol(argv[3]));
  unsigned n = 1u << depth;
  for (unsigned i = 0; i < n; i++) NEXT(i, depth);
  const struct ur_descriptor *d = dlsym(RTLD_DEFAULT, UR_DESCRIPTOR_SYMBOL);
  const struct ur_stack_table *st = d ? (const void *)(uintptr_t)d->stacks : NULL;
  wipe();
  ready("leak_count=%u failed=%u stacks=%u dropped=%u", n - failed, failed, st ? st->count : 0,
        st ? st->overflowed : 0);
  wait_for_test();
  return 0;
}
