/* A program that never frees: every block stays registered to the end. */
#include "shimtest.h"

#define N 50000

static size_t count_cb_n;
static void count_cb(uintptr_t p, size_t size, void *arg) {
  (void)p;
  (void)arg;
  if (size >= 1000 && size < 1000 + N) count_cb_n++;
}

int main(void) {
  for (int i = 0; i < N; i++) {
    char *p = malloc(1000 + (size_t)i);
    p[0] = 1;
  }
  int (*iterate)(uintptr_t, size_t, void (*)(uintptr_t, size_t, void *), void *) =
      SHIM_FN(malloc_iterate);
  CHECK(iterate(0, UINTPTR_MAX, count_cb, NULL) == 0);
  CHECK(count_cb_n == N);
  printf("OK\n");
  return 0;
}
