// C++ containers, new[] with an array cookie, a pointer to a second base:
// all kept. One object dropped.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "scenario.h"

struct A { virtual ~A() {} long a = 1; };
struct B { virtual ~B() {} long b = 2; };
struct C : A, B { long c = 3; };
struct D { ~D() {} long d[3]; };  // non-trivial destructor: new[] stores a cookie

std::vector<std::string> *g_vec;
std::map<int, std::string> *g_map;
std::unique_ptr<int[]> g_ints;
D *g_d_interior;  // points past the cookie, into the block
B *g_b;           // points to the B subobject, inside the C block

__attribute__((noinline)) static void setup() {
  g_vec = new std::vector<std::string>();
  for (int i = 0; i < 20; i++) g_vec->push_back(std::string(40, 'x'));
  g_map = new std::map<int, std::string>();
  for (int i = 0; i < 20; i++) (*g_map)[i] = std::string(50, 'y');
  g_ints.reset(new int[100]);
  g_d_interior = new D[4];
  g_b = new C();
  KEEP(new std::string(100, 'z'));  // the string object (32 bytes) and its buffer (101)
}

int main() {
  setup();
  wipe();
  ready("leak_count=2 leak_bytes=%zu", sizeof(std::string) + 101);
  wait_for_test();
  return 0;
}
