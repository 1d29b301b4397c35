/* Blocks referenced only from a dlopen'ed library's globals and TLS. */
#include <dlfcn.h>

#include "scenario.h"

__attribute__((noinline)) static void drop(void) { KEEP(malloc(99)); }

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  void (*setup)(void) = (void (*)(void))dlsym(h, "lib_setup");
  setup();
  drop();
  wipe();
  ready("leak_count=1 leak_bytes=99");
  wait_for_test();
  return 0;
}
