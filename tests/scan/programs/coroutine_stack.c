/* The main thread runs on a stack it malloc'd (a ucontext coroutine, as
 * coroutine libraries do) when it is scanned: its SP lies inside a heap
 * block, not in a stack mapping. The scan must not take the heap above SP
 * for a stack there (the rest of that mapping would keep every leak
 * alive); what the coroutine's frames hold is found through the block,
 * which a global points to. One block only the coroutine's frame holds
 * stays; two dropped before the switch (one pointing to the other) leak. */
#include <ucontext.h>

#include "scenario.h"

/* 64 KiB by default: from the brk heap, below glibc's mmap threshold, so
 * the dropped blocks lie above it in the same mapping, where a stack taken
 * from SP to the top of the mapping would reach (and make the first keep
 * the second). argv[1]: another size in KiB (256: a chunk mapped alone). */
static size_t stack_size = 64 * 1024;

static ucontext_t main_ctx, co_ctx;
static char *co_stack; /* the only pointer to the coroutine's stack */

static void coroutine(void) {
  void *volatile held = malloc(40); /* only in the coroutine's frame */
  /* The coroutine's stack is a block the scan reads whole, dead frames
   * included: malloc's can leave glibc's old top chunk there, which began
   * at the end of the dropped 24-byte block, inside its usable bytes. */
  wipe();
  ready("leak_count=2 leak_bytes=56");
  wait_for_test();
  KEEP(held);
  swapcontext(&co_ctx, &main_ctx);
}

/* main's stack is no live stack while the coroutine runs (no thread's SP
 * is in it), so it is scanned whole, dead frames too: clear deeper than
 * wipe() does. */
__attribute__((noinline)) static void deep_wipe(void) {
  volatile char buf[256 * 1024];
  memset((char *)buf, 0, sizeof buf);
  __asm__ volatile("" : : "r"(buf) : "memory"); /* the memset is not dead */
  wipe();
}

/* Above the coroutine's stack, as is what it points to. Out of line: no
 * callee-saved register of main's (swapcontext saves them in main_ctx, a
 * root) may hold them. */
__attribute__((noinline)) static void drop_two(void) {
  void **dropped = malloc(32);
  dropped[0] = malloc(24);
  KEEP(dropped);
}

int main(int argc, char **argv) {
  if (argc > 1) stack_size = (size_t)atol(argv[1]) * 1024;
  co_stack = malloc(stack_size);
  getcontext(&co_ctx);
  co_ctx.uc_stack.ss_sp = co_stack;
  co_ctx.uc_stack.ss_size = stack_size;
  co_ctx.uc_link = &main_ctx;
  makecontext(&co_ctx, coroutine, 0);
  drop_two();
  deep_wipe();
  swapcontext(&main_ctx, &co_ctx);
  return 0;
}
