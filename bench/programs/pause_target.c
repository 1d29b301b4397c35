/* A heap for bench/pause_bench.py, run under the shim.
 *
 *   pause_target N SIZE THREADS WHO
 *
 * N blocks of SIZE bytes, 90% held by a global array, 10% dropped. WHO says which threads allocate them: "main" (the
 * brk heap, glibc's main arena) or "all" (THREADS threads, each its share, so
 * most of the heap lies in glibc's per-thread arenas). Besides main, THREADS-1
 * threads spin, the worst case for stopping them. Prints READY and waits for
 * stdin to close. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t g_n, g_size;
static int g_threads;
static void **g_live;
static atomic_int g_done;

static void fill(size_t from, size_t to) {
  for (size_t i = from; i < to; i++) {
    void **b = malloc(g_size);
    memset(b, 0, g_size);
    if (i % 10 != 9) g_live[i] = b; /* every tenth block is dropped */
  }
}

static void fill_share(size_t k) {
  size_t per = g_n / (size_t)g_threads;
  fill(k * per, k + 1 == (size_t)g_threads ? g_n : (k + 1) * per);
}

static void *worker(void *arg) {
  if (arg) fill_share((size_t)arg);
  atomic_fetch_add(&g_done, 1);
  for (;;) __asm__ volatile("" ::: "memory");
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 5) return 2;
  g_n = strtoull(argv[1], NULL, 0);
  g_size = strtoull(argv[2], NULL, 0);
  g_threads = atoi(argv[3]);
  int all = strcmp(argv[4], "all") == 0;
  g_live = calloc(g_n, sizeof(void *));
  if (!g_live || g_threads < 1 || g_size < sizeof(void *)) return 2;
  pthread_t t;
  for (int i = 1; i < g_threads; i++)
    pthread_create(&t, NULL, worker, all ? (void *)(size_t)i : NULL);
  if (all)
    fill_share(0);
  else
    fill(0, g_n);
  while (atomic_load(&g_done) < g_threads - 1) usleep(1000);
  dprintf(1, "READY blocks=%zu\n", g_n);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
