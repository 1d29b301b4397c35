/*
 * Benchmark target: NBLOCKS blocks of BLOCK_SIZE bytes linked in random
 * address order, either as binary trees (block k of the order points to
 * blocks 2k+1 and 2k+2) or as one chain (the serial worst case for a
 * marker: every step waits for the previous block's memory); 90% reachable
 * from g_root, 10% leaked. NTHREADS-1 busy threads. Under the shim
 * (LD_PRELOAD, as bench/sweep_bench.py runs it) the shim's helper serves
 * snapshots; without it, the helper protocol (abi.h) is implemented inline.
 * Writes the allocations as packed (u64 begin, u64 size) to ALLOCS_FILE, then
 * prints "root=.. cmd=.. helper=.." and idles.
 *
 * Usage: heap_target ALLOCS_FILE NBLOCKS BLOCK_SIZE NTHREADS [tree|list]
 */
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "programs/heap_shape.h"
#include "unreachable/abi.h"

static uint32_t cmd_word;
static volatile pid_t helper_tid;
void *g_root;

static void *helper(void *arg) {
  (void)arg;
  helper_tid = gettid();
  for (;;) {
    while (__atomic_load_n(&cmd_word, __ATOMIC_ACQUIRE) == UR_CMD_IDLE)
      syscall(SYS_futex, &cmd_word, FUTEX_WAIT, UR_CMD_IDLE, NULL, NULL, 0);
    long child = syscall(SYS_clone, 0L, 0L, 0L, 0L, 0L);
    if (child == 0) syscall(SYS_exit_group, 0);
    if (child > 0) {
      int status;
      while (wait4((pid_t)child, &status, __WALL, NULL) < 0) {
      }
    }
    __atomic_store_n(&cmd_word, UR_CMD_IDLE, __ATOMIC_RELEASE);
  }
  return NULL;
}

static void *busy(void *arg) {
  volatile uint64_t *x = arg;
  for (;;) (*x)++;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) return 2;
  int list = argc == 6 && strcmp(argv[5], "list") == 0;
  size_t n = strtoull(argv[2], NULL, 0), size = strtoull(argv[3], NULL, 0);
  int nthreads = atoi(argv[4]);
  uint64_t *pairs = malloc(n * 2 * sizeof(*pairs));
  if (!pairs || !(g_root = heap_shape_make(n, size, list, pairs))) return 1;
  FILE *f = fopen(argv[1], "wb");
  if (!f || fwrite(pairs, 16, n, f) != n || fclose(f) != 0) return 1;
  free(pairs);
  pthread_t t;
  struct ur_descriptor *shim = dlsym(RTLD_DEFAULT, UR_DESCRIPTOR_SYMBOL);
  if (!shim) pthread_create(&t, NULL, helper, NULL);
  for (int i = 1; i < nthreads; i++) pthread_create(&t, NULL, busy, calloc(1, 64));
  if (shim) {
    while (!__atomic_load_n(&shim->helper_tid, __ATOMIC_ACQUIRE)) usleep(1000);
    helper_tid = (pid_t)shim->helper_tid;
  }
  while (!helper_tid) usleep(1000);
  void *cmd = shim ? (void *)(uintptr_t)shim->helper_cmd : (void *)&cmd_word;
  printf("root=%p cmd=%p helper=%d\n", (void *)&g_root, cmd, (int)helper_tid);
  fflush(stdout);
  for (;;) pause();
}
