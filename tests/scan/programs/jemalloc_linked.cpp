// A C++ program linked with jemalloc (built with libjemalloc.so.2 on its
// link line): jemalloc's own API (mallocx and friends) and its C++
// operators would take blocks the shim handed out, or keep C++ objects out
// of the registry. Every form is used on blocks of the other; the dropped
// ones are counted, among them C++ objects.
#include <new>
#include <string>
#include <vector>

#include "scenario.h"

extern "C" {
void *mallocx(size_t size, int flags);
void *rallocx(void *p, size_t size, int flags);
size_t xallocx(void *p, size_t size, size_t extra, int flags);
size_t sallocx(const void *p, int flags);
void dallocx(void *p, int flags);
void sdallocx(void *p, size_t size, int flags);
size_t nallocx(size_t size, int flags);
}

#define LG_ALIGN_64 6
#define ZERO 0x40

struct Node {
  Node *next;
  long pad[5];
};

std::vector<std::string> *g_kept;
void *g_aligned;

__attribute__((noinline)) static long setup() {
  long bytes = 0;
  sdallocx(malloc(100), 100, 0);  // malloc'd, freed by jemalloc's names
  dallocx(new char[10], 0);
  free(mallocx(50, 0));
  char *z = (char *)mallocx(64, ZERO | LG_ALIGN_64);
  for (int i = 0; i < 64; i++)
    if (z[i] || (uintptr_t)z % 64) abort();
  z = (char *)rallocx(z, 4096, ZERO | LG_ALIGN_64);
  if ((uintptr_t)z % 64 || z[4000] || sallocx(z, 0) < 4096 || xallocx(z, 1, 0, 0) < 4096) abort();
  g_aligned = z;
  if (nallocx(17, 0) < 17) abort();
  g_kept = new std::vector<std::string>();
  for (int i = 0; i < 20; i++) g_kept->push_back(std::string(40, 'k'));
  // Dropped: three C++ objects, a mallocx block and a rallocx'ed one.
  for (int i = 0; i < 3; i++) KEEP(new Node());
  KEEP(mallocx(200, ZERO));
  KEEP(rallocx(malloc(30), 300, 0));
  bytes += 3 * (long)sizeof(Node) + 200 + 300;
  return bytes;
}

int main() {
  long bytes = setup();
  try {
    KEEP(operator new((size_t)1 << 62));
    abort();
  } catch (const std::bad_alloc &) {
  }
  if (operator new((size_t)1 << 62, std::nothrow) != nullptr) abort();
  wipe();
  ready("leak_count=5 leak_bytes=%ld", bytes);
  wait_for_test();
  KEEP(g_kept);
  KEEP(g_aligned);
  return 0;
}
