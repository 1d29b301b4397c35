/* Loads a plugin, lets it leak a block, unloads it: the leak's backtrace
 * then points into an object that is no longer mapped. argv[1]: the plugin;
 * argv[2]: "relative" to dlopen it by a path relative to its directory. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "scenario.h" /* tests/scan/programs */

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *path = argv[1];
  char rel[4096];
  if (argc > 2 && strcmp(argv[2], "relative") == 0) {
    /* dlopen("./x.so") from its directory: the loader keeps the name relative */
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (chdir(dir) != 0) return 2;
    snprintf(rel, sizeof rel, "./%s", slash + 1);
    path = rel;
  }
  void *h = dlopen(path, RTLD_NOW);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  void (*leak)(void) = (void (*)(void))dlsym(h, "plugin_leak");
  leak();
  if (dlclose(h) != 0) return 2;
  wipe();
  ready("leak_count=1 leak_bytes=77");
  wait_for_test();
  return 0;
}
