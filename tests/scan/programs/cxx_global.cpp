/* A C++ global in a namespace holding the only pointer to a block: its
 * symbol is mangled (_ZN5cache5tableE), and why and retainers name it as
 * the program's source does, cache::table. */
#include "scenario.h"

namespace cache {
struct Table {
  void *slot;
};
Table table;
}  // namespace cache

int main() {
  cache::table.slot = malloc(100);
  wipe();
  ready("block=%lu", (unsigned long)(uintptr_t)cache::table.slot);
  wait_for_test();
  return 0;
}
