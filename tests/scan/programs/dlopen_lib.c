/* A dlopen'ed library keeping blocks in its globals and its (dynamic) TLS. */
#include <stdlib.h>

void *lib_global;
__thread void *lib_tls; /* external: the store must not be elided */

void lib_setup(void) {
  lib_global = malloc(500);
  lib_tls = malloc(600);
}
