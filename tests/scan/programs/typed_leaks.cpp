// Leaks a report without backtraces can still name: objects of two classes
// with virtual functions (the same size), and plain blocks of that size, one
// of them starting with a copy of a Fish's vptr. Nothing else leaks.
#include <cstdint>
#include <cstring>
#include <new>

#include "scenario.h"

namespace zoo {
struct Fish {
  virtual ~Fish() {}
  long fins = 2;
};
}  // namespace zoo

struct Bird {
  virtual ~Bird() {}
  virtual long wings() const { return 2; }
  long feathers = 1000;
};

static_assert(sizeof(zoo::Fish) == sizeof(Bird), "the two classes share a size");

__attribute__((noinline)) static void leak() {
  for (int i = 0; i < 3; i++) KEEP(new zoo::Fish());
  for (int i = 0; i < 5; i++) KEEP(new Bird());
  zoo::Fish model;
  void *vptr;
  memcpy(&vptr, &model, sizeof vptr);
  // A plain block whose first word points into Fish's vtable is named Fish.
  void *copy = malloc(sizeof(zoo::Fish));
  memcpy(copy, &vptr, sizeof vptr);
  KEEP(copy);
  // Plain blocks of the same size starting with a word that is no vtable.
  for (int i = 0; i < 4; i++) {
    uint64_t *p = static_cast<uint64_t *>(malloc(sizeof(zoo::Fish)));
    p[0] = 0x1234567890abcdefULL + i;
    p[1] = 0;
    KEEP(p);
  }
  for (int i = 0; i < 2; i++) {
    char *p = static_cast<char *>(malloc(100));
    memset(p, 'q', 100);
    KEEP(p);
  }
}

int main() {
  leak();
  wipe();
  ready("leak_count=15 fish=4 bird=5 untyped=4 big=2 size=%zu", sizeof(zoo::Fish));
  wait_for_test();
  return 0;
}
