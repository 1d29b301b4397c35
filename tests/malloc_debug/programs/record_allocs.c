/* record_allocs: a known sequence of calls on two threads, then a dump
 * request (SIGRTMAX-18) and a wait for the file, all without allocating. */
#include <pthread.h>
#include <malloc.h>

#include "md.h"

static void *worker(void *arg) {
  (void)arg;
  void *p = malloc(77);
  say("thread %u malloc %p\n", tid(), p);
  free(p);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  say("main %u\n", tid());
  char *a = malloc(20);
  char *b = calloc(32, 4);
  char *c = realloc(a, 12);  /* shrink: same block */
  char *volatile none = NULL; /* gcc would turn realloc(NULL, n) into malloc(n) */
  char *d = realloc(none, 30);
  void *e = memalign(16, 104);
  void *f;
  if (posix_memalign(&f, 64, 8)) return 1;
  void *g = aligned_alloc(32, 64);
  free(b);
  char *h = realloc(d, 0);
  say("a %p\nb %p\nc %p\nd %p\ne %p\nf %p\ng %p\nh %p\n", (void *)a, (void *)b, (void *)c,
      (void *)d, e, f, g, (void *)h);
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  pthread_join(t, NULL);
  if (!strcmp(mode, "exit")) return 0; /* record_allocs_on_exit */
  /* The test sends SIGRTMAX-18 while we idle, reads the file, then says go. */
  say("READY\n");
  wait_line();
  void *x = malloc(5);
  free(x);
  say("x %p\n", x);
  say("READY\n");
  wait_line();
  return 0;
}
