/* A forked child uses every shard at once: its fork words (the shards'
 * locks and owners, docs/shim.md "fork") start zeroed there, where the
 * parent's threads had owned the shards and one of them may hold a lock.
 *
 * THREADS threads allocate and keep big blocks (mapped alone, each in the
 * shard of its own 1 MiB), so they own shards, then idle. On "fork" from
 * stdin the parent forks; the child frees the threads' blocks, allocates
 * and frees BLOCKS more (nearly every shard), forks a grandchild that does
 * the same and must exit 0, then leaks one big block and one small one and
 * prints "CHILD pid leak_count=2 leak_bytes=B" and waits. */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "../../scan/programs/scenario.h"

#define THREADS 4
#define OWNED 256
#define BLOCKS 2048
#define BIG (1 << 20)
#define SMALL 200

static void *owned[THREADS][OWNED];
static pthread_barrier_t started;

static void *owner(void *arg) {
  void **mine = arg;
  for (int i = 0; i < OWNED; i++) mine[i] = malloc(BIG);
  pthread_barrier_wait(&started);
  for (;;) pause();
  return NULL;
}

/* Allocates BLOCKS big blocks, then frees them: 1 if every one came. */
static int churn(void) {
  static void *blocks[BLOCKS];
  int ok = 1;
  for (int i = 0; i < BLOCKS; i++) ok &= (blocks[i] = malloc(BIG)) != NULL;
  /* Cleared: the next mapping may land where a freed block was. */
  for (int i = 0; i < BLOCKS; i++) free(blocks[i]), blocks[i] = NULL;
  return ok;
}

static void child(void) {
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < OWNED; i++) free(owned[t][i]), owned[t][i] = NULL;
  int ok = churn();
  pid_t grandchild = fork();
  if (grandchild == 0) _exit(churn() ? 0 : 1);
  int status = -1;
  ok &= grandchild > 0 && waitpid(grandchild, &status, 0) == grandchild && status == 0;
  KEEP(malloc_clear_of_4g(BIG));
  KEEP(malloc(SMALL));
  wipe();
  char line[128];
  int n = snprintf(line, sizeof line, "CHILD %d leak_count=%d leak_bytes=%d\n",
                   ok ? (int)getpid() : -1, 2, BIG + SMALL);
  if (write(1, line, (size_t)n) < 0) _exit(99);
  wait_for_test();
  _exit(0);
}

int main(void) {
  mallopt(M_MMAP_THRESHOLD, BIG / 2); /* every big block mapped alone */
  pthread_barrier_init(&started, NULL, THREADS + 1);
  for (int t = 0; t < THREADS; t++) {
    pthread_t th;
    if (pthread_create(&th, NULL, owner, owned[t]) != 0) return 3;
  }
  pthread_barrier_wait(&started);
  ready("threads=%d", THREADS);
  char c;
  if (read(0, &c, 1) <= 0) return 0;
  pid_t pid = fork();
  if (pid == 0) child();
  wait_for_test();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return 0;
}
