/* A signal handler that allocates on a thread that got no shared slot
 * (every one of the shim's thread slots was taken when it first
 * allocated): the handler's call nested in the thread's own must be taken
 * for nested, as on a thread with a slot, and so take no backtrace (the
 * code it interrupted may be inside the unwinder) and leave the
 * interrupted call's announcement alone.
 *
 * Threads are started one at a time, each allocating once and waiting,
 * until one finds no slot of its own in the descriptor. That thread, the
 * only one that takes the timer's signal, runs the test: with backtraces
 * on every block is in a shard, and a thread without a shared slot owns
 * none, so it takes the lock of its loop block's shard on every malloc
 * and free. A 10 kHz timer interrupts the loop; whenever the handler finds
 * that lock held by its own thread, the thread is inside an allocator
 * call, and the handler allocates a block of 17 MiB (too big for a size
 * map: in a shard), looks it up as the scanner reads the registry, and
 * frees it. Once argv[1] interruptions did so (or argv[2] seconds passed)
 * it prints "HITS n FOUND f CAPTURED c": f of the handler's blocks were
 * registered when it looked (one in the shard its thread holds is put
 * aside, not yet), c of them with a backtrace. */
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include "shimtest.h"

#define LOOP_SIZE 40
#define BIG ((size_t)17 << 20)
#define STACK_SIZE ((size_t)64 << 10)

static struct ur_shard *shards;
static const struct ur_descriptor *desc;
static int target = -1; /* the loop block's shard */
static uint32_t me;
static volatile long hits, found, captured;
static long want, seconds;
static sem_t reported;
static volatile int slotless; /* set by the thread that found no slot */

static void on_alarm(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  (void)context;
  /* The thread is stopped here: the lock word cannot change under us. */
  uint32_t lock = __atomic_load_n(shim_shard_lock(desc, (unsigned)target), __ATOMIC_RELAXED) & 0x7fffffffu;
  if (lock != me) return;
  void *volatile p = malloc(BIG);
  uint32_t id = 0;
  if (p && registry_find(p, NULL, &id)) {
    found++;
    captured += id != 0;
  }
  free(p);
  hits++;
}

static void run_test(void) {
  me = (uint32_t)gettid();
  void *p = malloc(LOOP_SIZE);
  target = shard_of(p);
  CHECK(target >= 0); /* backtraces on: every block in a shard */
  free(p);
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &alarm, NULL);
  churn_until_hits(on_alarm, LOOP_SIZE, &hits, want, seconds);
  pthread_sigmask(SIG_BLOCK, &alarm, NULL);
}

static void *thread(void *arg) {
  (void)arg;
  void *volatile p = malloc(1); /* its first call: it takes a slot if one is left */
  free(p);
  if (my_slot() == NULL) {
    slotless = 1;
    run_test();
  }
  sem_post(&reported);
  if (!slotless) pause();
  return NULL;
}

int main(int argc, char **argv) {
  want = argc > 1 ? atol(argv[1]) : 200;
  seconds = argc > 2 ? atol(argv[2]) : 60;
  /* The handler's blocks mapped on their own each time, far from the loop's
   * (a freed mapping would raise glibc's threshold, and the next one could
   * come from the loop's heap, in the shard its thread holds). */
  CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
  desc = shim_desc();
  shards = (struct ur_shard *)(uintptr_t)desc->shards;
  uint32_t slots = shim_desc()->max_threads;
  CHECK(sem_init(&reported, 0, 0) == 0);
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm, NULL); /* inherited: only the test's thread unblocks it */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  CHECK(pthread_attr_setstacksize(&attr, STACK_SIZE) == 0);
  pthread_t t;
  for (uint32_t i = 0; i <= slots && !slotless; i++) {
    int err = pthread_create(&t, &attr, thread, NULL);
    if (err) {
      fprintf(stderr, "thread %u: %s\n", i, strerror(err));
      return 3;
    }
    while (sem_wait(&reported) != 0) continue;
  }
  CHECK(slotless);
  CHECK(pthread_join(t, NULL) == 0);
  printf("HITS %ld FOUND %ld CAPTURED %ld\n", hits, found, captured);
  fflush(stdout);
  _exit(0); /* the other threads wait for ever */
}
