/* dlsym failures and dlerror() calls (dovecot's auth process does these),
 * then wait for a scan: glibc frees every error result it made, so none
 * may be reported. */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
  void *h = dlopen("libm.so.6", RTLD_NOW);
  const char *seq = argc > 1 ? argv[1] : "fefe";
  for (const char *p = seq; *p; p++) {
    if (*p == 'f') dlsym(h, "no_such_symbol");
    else if (*p == 'o') dlsym(h, "cos");
    else if (*p == 'e') dlerror();
    else if (*p == 'n') dlopen("/nonexistent/libx.so", RTLD_NOW);
  }
  printf("READY leak_count=0 leak_bytes=0\n");
  fflush(stdout);
  pause();
  return 0;
}
