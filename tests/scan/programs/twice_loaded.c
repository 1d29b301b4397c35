/* Loads the library argv[1] (twice_loaded_lib.c, stripped) twice, each in
 * a link-map namespace of its own (dlmopen), and hands each load a 100-byte
 * and a 200-byte block to keep in its statics: two loads of one file, each
 * holding its own blocks. */
#include <dlfcn.h>

#include "scenario.h"

__attribute__((noinline)) static int load_and_hand(const char *path) {
  void *lib = dlmopen(LM_ID_NEWLM, path, RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "dlmopen: %s\n", dlerror());
    return 1;
  }
  void (*keep)(void *, void *) = (void (*)(void *, void *))dlsym(lib, "keep");
  if (keep == NULL)
    return 1;
  keep(malloc(100), malloc(200));
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  for (int i = 0; i < 2; i++) {
    if (load_and_hand(argv[1]) != 0)
      return 1;
    wipe();
  }
  ready("loads=2");
  wait_for_test();
  return 0;
}
