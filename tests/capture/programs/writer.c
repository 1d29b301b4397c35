/* A thread keeps counting in a global, in a heap block and in a fresh
 * mmap'ed page: a copy snapshot must hold each as it was at the stop, not as
 * it was first copied. With "unprivileged", it first becomes nobody, as a
 * daemon that drops root does: no longer dumpable, it cannot open its own
 * /proc/self/pagemap. */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include "../../scan/programs/scenario.h"

static volatile unsigned long in_data = 1;
static volatile unsigned long *in_heap;
static volatile unsigned long *in_mmap;

static void *count(void *arg) {
  (void)arg;
  for (;;) {
    in_data++;
    *in_heap += 1;
    *in_mmap += 1;
  }
  return NULL;
}

int main(int argc, char **argv) {
  in_heap = calloc(64, sizeof(unsigned long));
  in_mmap = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!in_heap || in_mmap == MAP_FAILED) return 1;
  if (argc > 1 && strcmp(argv[1], "unprivileged") == 0 &&
      (setuid(65534) != 0 || prctl(PR_GET_DUMPABLE) != 0))
    return 1;
  pthread_t t;
  pthread_create(&t, NULL, count, NULL);
  ready("data=%p heap=%p mmap=%p", (void *)&in_data, (void *)in_heap, (void *)in_mmap);
  wait_for_test();
  return 0;
}
