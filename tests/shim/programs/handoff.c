/* Blocks allocated by one thread and freed by another while their owner keeps
 * allocating: the shards each thread owns are taken from it mid-stream (the
 * shim's per-shard ownership, registry.c; blocks too big for a size map, or
 * all of them with a backtrace option), with malloc_iterate, malloc_disable
 * and fork() cutting in. Afterwards every held block is registered with its
 * size, nothing freed is, and each shard's counters match its table. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "shimtest.h"

#define THREADS 4
#define RING 512
#define ROUNDS 40000

static _Atomic(void *) ring[THREADS][RING];
static atomic_size_t ring_size[THREADS][RING];
static atomic_int go, done;

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  unsigned seed = (unsigned)t * 7919u + 3;
  while (!atomic_load(&go)) {
  }
  for (int r = 0; r < ROUNDS; r++) {
    /* Put a fresh block in our ring... */
    int i = (int)(rand_r(&seed) % RING);
    /* Mostly blocks for the size maps, some too big for them (a shard's). */
    size_t n = r % 16 ? 1 + rand_r(&seed) % 2000 : 65530 + rand_r(&seed) % 16;
    void *p = (r & 1) ? malloc(n) : calloc(1, n);
    CHECK(p != NULL);
    void *old = atomic_exchange(&ring[t][i], NULL);
    free(old);
    atomic_store(&ring_size[t][i], n);
    atomic_store(&ring[t][i], p);
    /* ...and free one from the next thread's ring. */
    int o = (t + 1) % THREADS, j = (int)(rand_r(&seed) % RING);
    free(atomic_exchange(&ring[o][j], NULL));
  }
  return NULL;
}

static void count(uintptr_t ptr, size_t size, void *arg) {
  (void)ptr;
  (void)size;
  ++*(size_t *)arg;
}

/* Cuts in while the workers run: walks, disables, forks. */
static void *meddler(void *arg) {
  (void)arg;
  int (*iterate)(uintptr_t, size_t, void (*)(uintptr_t, size_t, void *), void *) =
      SHIM_FN(malloc_iterate);
  void (*disable)(void) = SHIM_FN(malloc_disable);
  void (*enable)(void) = SHIM_FN(malloc_enable);
  int forks = 0;
  while (!atomic_load(&done)) {
    size_t n = 0;
    CHECK(iterate(0, UINTPTR_MAX, count, &n) == 0);
    disable();
    enable();
    if (forks < 3) {
      forks++;
      pid_t pid = fork();
      CHECK(pid >= 0);
      if (pid == 0) {
        void *q = malloc(100); /* the child's registry must work, unlocked */
        uint64_t size;
        int ok = q && registry_find(q, &size, NULL) && size == 100;
        free(q);
        _exit(ok && !registry_find(q, NULL, NULL) ? 0 : 1);
      }
      int status;
      CHECK(waitpid(pid, &status, 0) == pid);
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
  return NULL;
}

/* Each shard's count and tombstones agree with its table. */
static void check_counters(void) {
  struct ur_descriptor *d = shim_desc();
  struct ur_shard *shards = (struct ur_shard *)(uintptr_t)d->shards;
  for (uint32_t i = 0; i < d->num_shards; i++) {
    struct ur_entry *t = (struct ur_entry *)(uintptr_t)shards[i].table;
    uint64_t live = 0, tomb = 0;
    for (uint64_t j = 0; j < shards[i].capacity; j++) {
      if (t[j].key == UR_KEY_TOMBSTONE) tomb++;
      else if (t[j].key != UR_KEY_EMPTY) live++;
    }
    CHECK(live == shards[i].count && tomb == shards[i].tombstones);
  }
}

int main(void) {
  pthread_t th[THREADS], med;
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
  pthread_create(&med, NULL, meddler, NULL);
  atomic_store(&go, 1);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  atomic_store(&done, 1);
  pthread_join(med, NULL);

  size_t held = 0;
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < RING; i++) {
      void *p = atomic_load(&ring[t][i]);
      if (!p) continue;
      uint64_t size;
      CHECK(registry_find(p, &size, NULL) && size == atomic_load(&ring_size[t][i]));
      held++;
    }
  check_counters();
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < RING; i++) {
      void *p = atomic_load(&ring[t][i]);
      free(p);
      if (p) CHECK(!registry_find(p, NULL, NULL));
    }
  check_counters();
  printf("OK %zu\n", held);
  return 0;
}
