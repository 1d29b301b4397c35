/* A heap that shrinks and grows again, for the shim giving back its size
 * maps' pages (native/shim/give_back.c). Phases, each ended by a READY line,
 * each begun by a line on stdin:
 *   full:   BLOCKS blocks of 4000 bytes (64 MiB), every 256th dropped (leaked);
 *   shrunk: all freed but every 64th, malloc_trim(0);
 *   grown:  4096 blocks more in the heap given back, every 16th dropped. */
#include <malloc.h>

#include "scenario.h"

#define BLOCKS 16384
#define SIZE 4000
#define MORE 4096

static void *keep[BLOCKS + MORE];
static long leaked, leak_bytes;

static void next_phase(void) {
  char line[64];
  if (!fgets(line, sizeof line, stdin)) exit(0);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  for (long i = 0; i < BLOCKS; i++) {
    char *p = malloc(SIZE);
    p[0] = 1;
    if (i % 256 == 255) {
      KEEP(p);
      leaked++;
      leak_bytes += SIZE;
    } else {
      keep[i] = p;
    }
  }
  wipe();
  ready("phase=full leak_count=%ld leak_bytes=%ld", leaked, leak_bytes);
  next_phase();
  for (long i = 0; i < BLOCKS; i++)
    if (i % 64 != 0) {
      free(keep[i]);
      keep[i] = NULL;
    }
  malloc_trim(0);
  wipe();
  ready("phase=shrunk leak_count=%ld leak_bytes=%ld", leaked, leak_bytes);
  next_phase();
  for (long i = BLOCKS; i < BLOCKS + MORE; i++) {
    char *p = malloc(SIZE);
    p[0] = 1;
    if (i % 16 == 15) {
      KEEP(p);
      leaked++;
      leak_bytes += SIZE;
    } else {
      keep[i] = p;
    }
  }
  wipe();
  ready("phase=grown leak_count=%ld leak_bytes=%ld", leaked, leak_bytes);
  next_phase();
  return 0;
}
