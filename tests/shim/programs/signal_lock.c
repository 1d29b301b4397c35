/* A signal handler whose free lands while its own thread holds the lock of
 * the block's registry shard, at any instruction of the hold: just after
 * taking the lock, or just before releasing it. The handler must recognise
 * its own thread there (and put its update aside) rather than wait on
 * itself for ever.
 *
 * With backtraces on every block is in a shard. One shard (the one the
 * loop's block is in) is made shared by a second thread, so the main
 * thread takes its lock on every malloc and free of that block. A 10 kHz
 * timer interrupts the loop; whenever the handler finds that shard's lock
 * held by a thread the shard does not name as its holder (this thread is
 * the only one that takes it), it frees one of a pool of blocks in the
 * same shard. Once argv[1] such frees ran (or argv[2] seconds passed) it
 * prints "HITS n MISSING m": m of the blocks the program holds that the
 * registry does not list. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include "shimtest.h"

#define LOOP_SIZE 40
#define POOL_SIZE 48
#define TRIES 4096
#define POOL 32

static struct ur_shard *shards;
static const struct ur_descriptor *desc;
static unsigned target;      /* the loop block's shard */
static void *pool[POOL];     /* blocks in the target shard */
static volatile int npool;
static volatile long hits;
/* The loop looks at hits only between its calls, and a second tick can land
 * in the same hold of the lock (pending while the handler ran): the handler
 * stops itself at argv[1], so that HITS says exactly how many it was asked
 * for. */
static long want;
static uint32_t me;

static void on_alarm(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  (void)context;
  const struct ur_shard *s = &shards[target];
  /* The thread is stopped here: the two words cannot change under us. */
  uint32_t lock = __atomic_load_n(shim_shard_lock(desc, target), __ATOMIC_RELAXED);
  uint32_t owner = __atomic_load_n(&s->owner_tid, __ATOMIC_RELAXED);
  if (lock == 0 || owner == me || npool <= 1 || hits >= want) return;
  npool--;
  free(pool[npool]);
  pool[npool] = NULL;
  hits++;
}

static int attached;

/* Takes the target shard once (freeing a pool block), so that the main
 * thread's next use finds it another's and makes it shared: locked from
 * then on. */
static void *other(void *arg) {
  (void)arg;
  free(pool[--npool]);
  pool[npool] = NULL;
  __atomic_store_n(&attached, 1, __ATOMIC_RELEASE);
  pause();
  return NULL;
}

int main(int argc, char **argv) {
  want = argc > 1 ? atol(argv[1]) : 16;
  long seconds = argc > 2 ? atol(argv[2]) : 60;
  CHECK(want < POOL - 1);
  me = (uint32_t)gettid();
  desc = shim_desc();
  shards = (struct ur_shard *)(uintptr_t)desc->shards;
  void *p = malloc(LOOP_SIZE);
  int k = shard_of(p);
  CHECK(k >= 0); /* backtraces on: every block in a shard */
  target = (unsigned)k;
  free(p);
  static void *tries[TRIES];
  for (int i = 0; i < TRIES; i++) tries[i] = malloc(POOL_SIZE);
  for (int i = 0; i < TRIES; i++) {
    if (npool < POOL && shard_of(tries[i]) == k) pool[npool++] = tries[i];
    else free(tries[i]);
  }
  CHECK(npool > want + 1);
  sigset_t alarm, old;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm, &old);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, other, NULL) == 0);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  while (!__atomic_load_n(&attached, __ATOMIC_ACQUIRE)) sched_yield();
  churn_until_hits(on_alarm, LOOP_SIZE, &hits, want, seconds);
  long missing = 0;
  for (int i = 0; i < npool; i++) missing += !registry_find(pool[i], NULL, NULL);
  printf("HITS %ld MISSING %ld\n", hits, missing);
  return 0;
}
