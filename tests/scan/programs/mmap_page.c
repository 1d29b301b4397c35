/* The only pointer to a block is in a private anonymous mmap page (a user pool). */
#include <sys/mman.h>

#include "scenario.h"

static void **volatile g_pool;

__attribute__((noinline)) static void setup(void) {
  void **pool = mmap(NULL, 4096 * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  pool[1000] = malloc(321);
  /* Keep only a disguised pointer to the pool so nothing but the page itself
   * refers to the block. */
  g_pool = (void **)((unsigned long)pool ^ 0x5555);
  KEEP(malloc(123));
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=123");
  wait_for_test();
  return 0;
}
