/* A stripped program (built with -s) that leaks a method table, as nghttpx
 * leaks the BIO_METHOD its BIO_meth_new made at each configuration reload:
 * 96 bytes, a type word, then a pointer to its name (a strdup'ed string)
 * and one to a function. At start: one table; on "grow" (a line on stdin):
 * another from the same site, then GROWN. */
#include "../../scan/programs/scenario.h"

struct method {
  int type;
  char *name;
  void (*write)(void);
  char rest[72];
};

void *volatile sink;

__attribute__((noinline)) static void write_fn(void) { sink = NULL; }

__attribute__((noinline)) static void make_method(void) {
  struct method *m = calloc(1, sizeof *m);
  m->type = 0x504;
  m->name = strdup("socket");
  m->write = write_fn;
  sink = m;
  sink = NULL;
}

int main(void) {
  make_method();
  wipe();
  ready("leak_count=2 leak_bytes=103");
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "grow", 4) == 0) {
      make_method();
      wipe();
      printf("GROWN leak_count=4 leak_bytes=206\n");
      fflush(stdout);
    }
  }
  return 0;
}
