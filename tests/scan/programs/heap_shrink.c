/* A heap that shrinks and grows again, for the shim giving back its size
 * maps' pages (native/shim/give_back.c). Phases, each ended by a READY line,
 * each begun by a line on stdin:
 *   full:   BLOCKS blocks of 200 bytes (64 MiB), every 8192nd dropped (leaked);
 *   shrunk: all freed but every 1024th, malloc_trim(0);
 *   grown:  65536 blocks more in the heap given back, every 16th dropped.
 * Blocks this small have the maps' densest level (a byte per 16 of heap). */
#include <malloc.h>

#include "scenario.h"

#define BLOCKS 320000
#define SIZE 200
#define MORE 65536

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
    if (i % 8192 == 8191) {
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
    if (i % 1024 != 0) {
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
