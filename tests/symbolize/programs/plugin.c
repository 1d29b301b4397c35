/* A plugin that leaks one block from a function of its own. */
#include <stdlib.h>

static void *volatile sink;

__attribute__((noinline)) static void plugin_alloc(void) {
  sink = malloc(77);
  sink = NULL;
}

void plugin_leak(void) {
  plugin_alloc();
  __asm__ volatile("" ::: "memory"); /* not a tail call: plugin_leak stays a frame */
}
