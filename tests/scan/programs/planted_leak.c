/* Preloaded into a real service run without the shim: at load, drops
 * PLANTED blocks of 100 to 100 + PLANTED - 1 bytes, so a scan of the
 * service must find exactly those (and nothing of the service's own). */
#include <stdlib.h>

#define PLANTED 25

__attribute__((constructor)) static void plant(void) {
  for (int i = 0; i < PLANTED; i++) {
    void *volatile p = malloc(100 + (size_t)i);
    (void)p;
  }
}
