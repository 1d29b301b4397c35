/* The process's first realloc() happens inside dlerror(), after a failed
 * dlsym: glibc's pending error result must survive whatever the shim does
 * for itself there (a dlsym of the shim's own would free that result behind
 * the registry; dlerror would then write into the freed chunk, and the next
 * mallocs take a corrupted tcache list). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  void *h = dlopen("libm.so.6", RTLD_NOW);
  if (!h) return 2;
  void *volatile a = malloc(24); /* volatile: kept at -O1 */
  void *volatile b = malloc(24);
  free(a);
  free(b); /* glibc's tcache: b, then a; the pending error takes b */
  if (dlsym(h, "no_such_symbol")) return 3;
  char *e = dlerror(); /* asprintf: the first realloc */
  void *x[8];
  for (int i = 0; i < 8; i++) {
    x[i] = malloc(24);
    if (!x[i]) return 6;
  }
  if (!e || !strstr(e, "no_such_symbol")) {
    printf("dlerror lost: %s\n", e ? e : "(null)");
    return 4;
  }
  for (int i = 0; i < 8; i++) {
    memset(x[i], 1, 24);
    free(x[i]);
  }
  if (dlerror() != NULL) return 5; /* reported once */
  if (dlsym(h, "cos") == NULL || dlerror() != NULL) return 7;
  printf("OK\n");
  return 0;
}
