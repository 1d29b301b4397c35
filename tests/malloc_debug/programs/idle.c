/* A target for the signal-driven options: known live blocks from two sites,
 * then READY and idle (no allocation at all) until stdin closes. */
#include "md.h"

void *small[10];
void *large[3];

__attribute__((noinline)) static void site_small(void) {
  for (int i = 0; i < 10; i++) small[i] = malloc(1000);
}

__attribute__((noinline)) static void site_large(void) {
  for (int i = 0; i < 3; i++) large[i] = malloc(2000);
}

int main(int argc, char **argv) {
  site_small();
  site_large();
  if (argc > 1 && !strcmp(argv[1], "busy")) {
    say("READY pid=%d\n", (int)getpid());
    for (;;) { /* keep allocating until killed */
      void *p = malloc(64);
      KEEP(p);
      free(p);
    }
  }
  say("READY pid=%d\n", (int)getpid());
  wait_line();
  return 0;
}
