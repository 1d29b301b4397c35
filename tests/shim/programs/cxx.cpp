// C++ new/delete (libstdc++ calls malloc/free and aligned_alloc through the PLT).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "shimtest.h"

struct alignas(128) Wide {
  char bytes[200];
};

int main() {
  int *arr = new int[10];
  CHECK(registered_with_size(arr, 40));
  uintptr_t arr_addr = reinterpret_cast<uintptr_t>(arr);
  delete[] arr;
  CHECK(!registry_find(reinterpret_cast<void *>(arr_addr), nullptr, nullptr));

  Wide *w = new Wide;
  CHECK(reinterpret_cast<uintptr_t>(w) % 128 == 0);
  CHECK(registered_with_size(w, sizeof(Wide)));
  delete w;

  std::vector<std::string> v;
  for (int i = 0; i < 1000; i++) v.push_back(std::string(100, 'a' + i % 26));
  CHECK(registered_with_size(v.data(), v.capacity() * sizeof(std::string)));
  CHECK(registered_with_size(v[500].data(), 101));
  auto sp = std::make_shared<std::vector<int>>(1000, 7);
  CHECK(registered_with_size(sp->data(), 4000));
  try {
    throw std::string(300, 'x');  // exception objects come from malloc too
  } catch (const std::string &s) {
    CHECK(s.size() == 300);
  }
  std::printf("OK\n");
  return 0;
}
