/* A heap written all over, all the time, as CPython writes the reference
 * count of every object it touches: BLOCKS blocks of 256 bytes, and two
 * threads that keep bumping a counter in each of them. A concurrent mark's
 * rounds never catch up with it. Five blocks are dropped at the start.
 * "idle": no writing threads. Commands on stdin, one a line: "map" maps
 * 32 MiB of anonymous memory, fills it and answers "MAPPED addr" (a mapping
 * born while a scan tracks writes). */
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "../../scan/programs/scenario.h"

#define BLOCKS 300000
#define BLOCK 256
#define LEAKS 5
#define MAPPED (32u << 20)

struct block {
  volatile uint64_t count;
  struct block *next;
  char pad[BLOCK - 16];
};

static struct block **blocks; /* a heap array: the only pointer to each */
static void *mapped;

static void *bump(void *arg) {
  (void)arg;
  for (;;)
    for (size_t i = 0; i < BLOCKS; i++) blocks[i]->count++;
  return NULL;
}

static int read_line(char *buf, size_t size) {
  size_t n = 0;
  char c;
  while (n + 1 < size) {
    if (read(0, &c, 1) <= 0) return -1;
    if (c == '\n') break;
    buf[n++] = c;
  }
  buf[n] = 0;
  return (int)n;
}

int main(int argc, char **argv) {
  int idle = 0;
  for (int i = 1; i < argc; i++) {
    idle |= strcmp(argv[i], "idle") == 0;
    /* As a daemon that drops root: it can open no synchronous userfaultfd
     * (unless vm.unprivileged_userfaultfd is set), so its copy snapshot
     * would be the classic one. */
    if (strcmp(argv[i], "unprivileged") == 0 && setuid(65534) != 0) return 1;
  }
  blocks = malloc(BLOCKS * sizeof *blocks);
  if (!blocks) return 1;
  for (size_t i = 0; i < BLOCKS; i++) {
    blocks[i] = calloc(1, sizeof(struct block));
    if (!blocks[i]) return 1;
    if (i) blocks[i - 1]->next = blocks[i];
  }
  for (int i = 0; i < LEAKS; i++) KEEP(malloc(100));
  wipe();
  pthread_t t[2];
  for (int i = 0; !idle && i < 2; i++) pthread_create(&t[i], NULL, bump, NULL);
  ready("leak_count=%d leak_bytes=%d", LEAKS, LEAKS * 100);
  char line[64];
  while (read_line(line, sizeof line) >= 0) {
    if (strcmp(line, "map") == 0) {
      mapped = mmap(NULL, MAPPED, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mapped == MAP_FAILED) return 1;
      memset(mapped, 1, MAPPED);
      char out[64];
      int n = snprintf(out, sizeof out, "MAPPED %p\n", mapped);
      if (write(1, out, (size_t)n) < 0) return 1;
    }
  }
  return 0;
}
