/* A signal handler that allocates while its own thread holds the lock of
 * the shim's memory (the region): the handler's call needs memory from the
 * region, and must not wait on its own thread for ever.
 *
 * The loop allocates blocks of 1.1 MiB, which glibc maps on their own,
 * each in address space no size map covers yet: each call makes a map in
 * the region, which the shim makes writable with mprotect while it holds
 * the region's lock (and its lock for making maps). The program calls no
 * mprotect and glibc calls none for it here, so a 10 kHz timer landing
 * inside mprotect while the thread is in an allocator call has found the
 * thread there. The handler then allocates a block of 1.1 MiB too and
 * keeps it: it cannot have a map (its thread is making one), so it goes to
 * its shard, and when that shard has no table yet, making one needs the
 * region. Half the shards are given a table first (blocks of 2 MiB, which
 * take a backtrace: backtrace_min_size, and so go to shards). Once argv[1]
 * blocks were allocated so (or argv[2] seconds passed) it prints "HITS n
 * MISSING m UNREGISTERED u": m of the handler's blocks that the registry
 * does not list, u the shim's count of the blocks it could not register. */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

#include "shimtest.h"

#define KEPT 64
#define BIG ((size_t)1 << 20 | (size_t)1 << 17)
#define WARM ((size_t)2 << 20)
#define MAX_BLOCKS 2048

static struct ur_thread_slot *mine;
static uintptr_t mprotect_lo; /* libc's mprotect: a system call and a return */
static void *kept[KEPT];
static volatile int hits;
/* The loop looks at hits only between its calls, and a second tick can land
 * in the same mprotect (pending while the handler ran): the handler stops
 * itself at argv[1], so that HITS says exactly how many it was asked for. */
static long want;

static void on_alarm(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  uintptr_t pc = (uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
  if (pc < mprotect_lo || pc >= mprotect_lo + 32 || hits >= want) return;
  if (__atomic_load_n(&mine->op, __ATOMIC_RELAXED) == UR_OP_NONE) return;
  kept[hits] = malloc(BIG);
  hits++;
}

int main(int argc, char **argv) {
  want = argc > 1 ? atol(argv[1]) : 8;
  long seconds = argc > 2 ? atol(argv[2]) : 60;
  CHECK(want <= KEPT);
  mprotect_lo = (uintptr_t)dlsym(RTLD_DEFAULT, "mprotect");
  CHECK(mprotect_lo != 0);
  /* Out of single-thread mode (whose thread marks no shard it is inside),
   * with a thread the timer never interrupts. */
  CHECK(start_idle_thread());
  free(malloc(1));
  mine = my_slot();
  CHECK(mine != NULL);
  struct ur_descriptor *d = shim_desc();
  const struct ur_shard *shards = (const struct ur_shard *)(uintptr_t)d->shards;
  static void *warm[1024];
  int nwarm = 0;
  for (uint32_t with = 0; with < d->num_shards / 2 && nwarm < 1024;) {
    warm[nwarm++] = malloc(WARM);
    with = 0;
    for (uint32_t i = 0; i < d->num_shards; i++) with += shards[i].capacity != 0;
  }
  while (nwarm > 0) free(warm[--nwarm]);
  static void *blocks[MAX_BLOCKS];
  every_100us(on_alarm);
  time_t end = time(NULL) + seconds;
  int n = 0;
  while (hits < want && n < MAX_BLOCKS && time(NULL) < end) blocks[n++] = malloc(BIG);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  long missing = 0;
  for (int i = 0; i < hits; i++) missing += !registry_find(kept[i], NULL, NULL);
  printf("HITS %d MISSING %ld UNREGISTERED %llu\n", hits, missing,
         (unsigned long long)d->unregistered);
  while (n > 0) free(blocks[--n]);
  for (int i = 0; i < hits; i++) free(kept[i]);
  return 0;
}
