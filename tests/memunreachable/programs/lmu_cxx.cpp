// The C++ interface (GetUnreachableMemory, GetUnreachableMemoryString),
// header-only over the shim's unreachable_lmu_scan. One mode per argv[1];
// results are printed as "name value..." lines on stdout.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <string>

#include <unreachable/memunreachable.h>

#include "../../scan/programs/scenario.h"

static volatile uintptr_t hidden[8];

__attribute__((noinline)) static void make_hidden(int i, size_t size) {
  char* p = static_cast<char*>(malloc(size));
  memset(p, 0, size);
  snprintf(p, size, "leak-%d", i);
  hidden[i] = ~reinterpret_cast<uintptr_t>(p);
}

__attribute__((noinline)) static void print_info(const char* tag, bool ok,
                                                 const android::UnreachableMemoryInfo& info) {
  printf("%s ok=%d num_leaks=%zu leak_bytes=%zu num_allocations=%zu allocation_bytes=%zu "
         "entries=%zu\n",
         tag, ok, info.num_leaks, info.leak_bytes, info.num_allocations, info.allocation_bytes,
         info.leaks.size());
  for (const android::Leak& l : info.leaks) {
    printf("%s.leak begin=%zx size=%zu referenced=%zu/%zu similar=%zu/%zu/%zu/%zu total=%zu "
           "contents=%.32s frames=",
           tag, static_cast<size_t>(l.begin), l.size, l.referenced_count, l.referenced_size,
           l.similar_count, l.similar_size, l.similar_referenced_count,
           l.similar_referenced_size, l.total_size, l.contents);
    for (size_t f = 0; f < l.backtrace.num_frames; f++)
      printf("%s%zx", f ? "," : "", static_cast<size_t>(l.backtrace.frames[f]));
    printf("\n");
  }
  fflush(stdout);
}

// Several leaks of different sizes; the report must keep the `limit` largest.
__attribute__((noinline)) static int limit_mode() {
  for (int i = 0; i < 5; i++) make_hidden(i, 100 * (i + 1));
  wipe();
  {
    UnreachableMemoryInfo info;  // the global using-declaration
    bool ok = GetUnreachableMemory(info, 3);
    print_info("first", ok, info);
    wipe();
    ok = GetUnreachableMemory(info, 3);  // the same object again: stale entries must not count
    print_info("second", ok, info);
    wipe();
    ok = android::GetUnreachableMemory(info);  // default limit 100
    print_info("all", ok, info);
  }
  return 0;
}

// libmemunreachable's MemunreachableTest.twice, with fresh objects each time.
__attribute__((noinline)) static int twice_mode() {
  make_hidden(0, 1024);
  for (int round = 0; round < 2; round++) {
    wipe();
    android::UnreachableMemoryInfo info;
    bool ok = android::GetUnreachableMemory(info);
    print_info(round ? "round1" : "round0", ok, info);
  }
  return 0;
}

__attribute__((noinline)) static int version_mode() {
  android::UnreachableMemoryInfo info;
  info.version = 1;
  printf("version1 ok=%d\n", android::GetUnreachableMemory(info));
  std::string s = android::GetUnreachableMemoryString();
  printf("string_nonempty %d\n", !s.empty());
  fflush(stdout);
  return 0;
}

// The same report twice: from inside (string and structure), then, after
// READY, from outside by the test with unreachable-cli.
static std::string* g_text;

__attribute__((noinline)) static int report_twice(bool contents, const char* ready_info);

__attribute__((noinline)) static int compare_mode(bool contents) {
  make_hidden(0, 40);
  make_hidden(1, 16);
  make_hidden(2, 300);
  return report_twice(contents, "leak_count=3");
}

// Leaks made where the frame's function name and source file hold spaces,
// parentheses and " at " (make_ugly, at the end of this file).
void* make_ugly(size_t n);

__attribute__((noinline)) static int names_mode() {
  for (int i = 0; i < 2; i++) hidden[i] = ~reinterpret_cast<uintptr_t>(make_ugly(48 + 16 * i));
  return report_twice(false, "leak_count=2");
}

__attribute__((noinline)) static int report_twice(bool contents, const char* ready_info) {
  wipe();
  {
    android::UnreachableMemoryInfo info;
    bool ok = android::GetUnreachableMemory(info);
    print_info("info", ok, info);
  }  // info is gone (and zeroed) before the outside scan
  wipe();
  g_text = new std::string(android::GetUnreachableMemoryString(contents));
  printf("text %zu\n", g_text->size());
  fwrite(g_text->data(), 1, g_text->size(), stdout);
  fflush(stdout);  // ready() writes to fd 1 directly
  wipe();
  ready("%s", ready_info);
  wait_for_test();
  return 0;
}

// Threads that hold blocks on their stacks (reachable), one that churns
// allocations during the scans, and the scan called from a worker thread.
static pthread_barrier_t g_barrier;
static std::atomic<int> g_stop;

__attribute__((noinline)) static void* holder(void*) {
  char* volatile mine = static_cast<char*>(malloc(4096));
  pthread_barrier_wait(&g_barrier);
  while (!g_stop.load()) usleep(1000);
  free(mine);
  return nullptr;
}

__attribute__((noinline)) static void* churner(void*) {
  pthread_barrier_wait(&g_barrier);
  while (!g_stop.load()) {
    void* p = malloc(64 + (rand() & 1023));
    KEEP(p);
    free(p);
  }
  return nullptr;
}

__attribute__((noinline)) static void* scanner(void*) {
  pthread_barrier_wait(&g_barrier);
  for (int round = 0; round < 2; round++) {
    wipe();
    android::UnreachableMemoryInfo info;
    bool ok = android::GetUnreachableMemory(info);
    print_info(round ? "thread1" : "thread0", ok, info);
  }
  wipe();
  printf("noleaks %d\n", NoLeaks());
  fflush(stdout);
  return nullptr;
}

__attribute__((noinline)) static int threads_mode() {
  make_hidden(0, 777);
  wipe();
  const int holders = 4;
  pthread_t t[holders + 2];
  pthread_barrier_init(&g_barrier, nullptr, holders + 3);
  for (int i = 0; i < holders; i++) pthread_create(&t[i], nullptr, holder, nullptr);
  pthread_create(&t[holders], nullptr, churner, nullptr);
  pthread_create(&t[holders + 1], nullptr, scanner, nullptr);
  pthread_barrier_wait(&g_barrier);
  pthread_join(t[holders + 1], nullptr);
  g_stop.store(1);
  for (int i = 0; i < holders + 1; i++) pthread_join(t[i], nullptr);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  if (mode == "limit") return limit_mode();
  if (mode == "twice") return twice_mode();
  if (mode == "version") return version_mode();
  if (mode == "compare") return compare_mode(false);
  if (mode == "compare-contents") return compare_mode(true);
  if (mode == "names") return names_mode();
  if (mode == "threads") return threads_mode();
  if (mode == "noshim") {  // run without LD_PRELOAD: weak symbols are NULL
    android::UnreachableMemoryInfo info;
    printf("get ok=%d\n", android::GetUnreachableMemory(info));
    printf("string %s", android::GetUnreachableMemoryString().c_str());
    return 0;
  }
  return 2;
}

// Last in the file: #line names the source file of everything after it.
#line 1 "/src/dir at home (copy)/make leak.cc"
namespace {
char pick(int) { return 'u'; }

template <class F>
struct Maker {
  __attribute__((noinline)) void* operator()(F f, size_t n) const {
    char* p = static_cast<char*>(malloc(n));
    memset(p, f(0), n);
    return p;
  }
};
}  // namespace

void* make_ugly(size_t n) { return Maker<char (*)(int)>()(pick, n); }
