/* Two threads, each with its own malloc'ed alternate signal stack that only
 * the kernel holds (13,504 bytes, as Erlang's), then both parked in pause()
 * on one stack they share: a raw loop on a static buffer that pushes
 * nothing, so both stop with the same SP. A scan without the shim asks each
 * its sigaltstack() with the answer written below that SP, the same place
 * for both: asked at once, one answer would be read as the other's and the
 * other's stack reported leaked. One plain block leaks. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "scenario.h"

#define THREADS 2
#define STACK_SIZE 13504

static char shared[8192] __attribute__((aligned(64)));
static atomic_int installed;

/* pause() for ever on the shared stack, touching no memory. */
__attribute__((noreturn)) static void park_on_shared_stack(void) {
  __asm__ volatile(
      "mov %0, %%rsp\n"
      "1: mov $34, %%eax\n" /* pause */
      "syscall\n"
      "jmp 1b\n"
      :
      : "r"(shared + sizeof shared - 64)
      : "rax", "rcx", "r11", "memory");
  __builtin_unreachable();
}

static void *thread_main(void *arg) {
  (void)arg;
  stack_t ss = {.ss_sp = malloc(STACK_SIZE), .ss_size = STACK_SIZE};
  if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0) exit(1);
  memset(&ss, 0, sizeof ss);
  KEEP(&ss);
  wipe();
  atomic_fetch_add(&installed, 1);
  park_on_shared_stack();
}

int main(void) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, thread_main, NULL);
  while (atomic_load(&installed) < THREADS) usleep(1000);
  KEEP(malloc(40));
  wipe();
  ready("leak_count=1 leak_bytes=40 threads=%d", THREADS + 1);
  wait_for_test();
  return 0;
}
