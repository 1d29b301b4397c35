/* Stays alive until stdin closes, after printing where one of its own
 * functions is: a live target whose files a symbolizer opens. */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) int waiter_marker_function(int x) {
  return x * 3 + 1;
}

int main(void) {
  printf("fn %p\n", (void *)&waiter_marker_function);
  fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return waiter_marker_function(0) == 1 ? 0 : 1;
}
