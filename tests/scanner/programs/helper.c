/*
 * Target for snapshot and sweep tests. It implements the shim's snapshot
 * helper protocol (abi.h ur_helper_cmd) by itself: a thread futex-waits on a
 * command word; on UR_CMD_SNAPSHOT it raw-clones (flags 0: no SIGCHLD), the
 * child exits at once if it ever runs, the parent wait4s it, then goes back
 * to IDLE. Meanwhile the main thread keeps changing `value`.
 *
 * It also lays out blocks for sweep(): g_root -> A -> B (live); C alone,
 * D <-> E, F -> G (leaked).
 *
 * Prints one line of key=value pairs (hex addresses) once ready.
 */
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unreachable/abi.h"

static uint32_t cmd_word;
static uint32_t unwatched_word;
static volatile uint64_t value;
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

static void *idle(void *arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}

static void *blocks[7];
static const size_t sizes[7] = {32, 24, 40, 16, 16, 64, 8};

static void layout(void) {
  for (int i = 0; i < 7; i++) blocks[i] = calloc(1, sizes[i]);
  void **A = blocks[0], **D = blocks[3], **E = blocks[4], **F = blocks[5];
  A[1] = blocks[1];
  D[0] = E;
  E[1] = (char *)D + 3; /* interior */
  F[2] = blocks[6];
  g_root = A;
}

int main(void) {
  pthread_t t;
  layout();
  pthread_create(&t, NULL, helper, NULL);
  pthread_create(&t, NULL, idle, NULL);
  while (!helper_tid) usleep(1000);
  printf("cmd=%p unwatched=%p value=%p helper=%d g_root=%p", (void *)&cmd_word,
         (void *)&unwatched_word, (void *)&value, (int)helper_tid, (void *)&g_root);
  for (int i = 0; i < 7; i++) printf(" b%d=%p s%d=%zu", i, blocks[i], i, sizes[i]);
  printf("\n");
  fflush(stdout);
  /* Forget the block addresses so only g_root references A. */
  memset(blocks, 0, sizeof(blocks));
  for (;;) value++;
}
