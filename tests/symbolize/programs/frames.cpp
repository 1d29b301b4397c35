// Backtraces from known functions and lines, for the symbolizer tests.
//
// Records glibc backtrace()s (return addresses, like the shim's) of "allocations"
// made from known places, then prints them and its own /proc/self/maps:
//   rec SIZE PC PC ...      one record per tracked allocation
//   snapshot                separates the baseline from the leaks (diff test)
//   MAPS ... END
// Lines marked LINE:<name> are found by the tests in this file.
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <thread>
#include <vector>

struct Record {
  size_t size;
  int n;
  void* pcs[32];
};
static std::vector<Record>* g_records;

extern "C" __attribute__((noinline)) void* tracked_alloc(size_t size) {
  Record r;
  r.size = size;
  r.n = backtrace(r.pcs, 32);  // LINE:tracked_alloc
  g_records->push_back(r);
  return malloc(size);
}

namespace demo {

template <typename T>
struct Box {
  T v;
  __attribute__((noinline)) Box operator+(const Box& o) const {
    void* p = tracked_alloc(24);  // LINE:operator_plus
    free(p);
    return Box{v + o.v};
  }
};

template <typename T>
__attribute__((noinline)) T twice(T x) {
  Box<T> a{x}, b{x};
  Box<T> c = a + b;  // LINE:twice
  return c.v;
}

class Widget {
 public:
  __attribute__((noinline)) int Bar(int x);
};

int Widget::Bar(int x) {
  return twice<int>(x) + 1;  // LINE:widget_bar
}

}  // namespace demo

extern "C" __attribute__((noinline)) int compare_ints(const void* a, const void* b) {
  static int once;
  if (!once++) tracked_alloc(40);  // LINE:compare_ints
  return *(const int*)a - *(const int*)b;
}

__attribute__((noinline)) void leaky(void) {
  tracked_alloc(100);  // LINE:leaky
}

__attribute__((noinline)) void baseline(void) {
  tracked_alloc(64);  // LINE:baseline
}

static void print_records(void) {
  for (const Record& r : *g_records) {
    printf("rec %zu", r.size);
    for (int i = 0; i < r.n; i++) printf(" %lx", (unsigned long)r.pcs[i]);
    printf("\n");
  }
  g_records->clear();
}

int main(int argc, char** argv) {
  int leaks = argc > 1 ? atoi(argv[1]) : 3;
  g_records = new std::vector<Record>;
  g_records->reserve(1024);
  demo::Widget w;
  int r = w.Bar(3);  // LINE:main_bar
  int values[] = {5, 3, 9, 1};
  qsort(values, 4, sizeof(int), compare_ints);  // LINE:main_qsort
  std::thread t([] { tracked_alloc(8); });  // LINE:lambda
  t.join();
  baseline();
  baseline();
  print_records();
  printf("snapshot\n");
  baseline();
  baseline();
  for (int i = 0; i < leaks; i++) leaky();  // LINE:main_leaky
  print_records();
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  printf("MAPS\n");
  while (maps && fgets(line, sizeof line, maps)) fputs(line, stdout);
  printf("END\n");
  fflush(stdout);
  if (argc > 2) {  // "wait": stay alive until stdin closes
    while (fgets(line, sizeof line, stdin)) {
    }
  }
  return r == 7 ? 0 : 1;
}
