/* Leaks from three named allocation sites, one of them growing on demand.
 *
 * At start: load_config leaks one 31-byte string (a leak a user sets aside),
 * cache_insert leaks 3 blocks of 48 bytes. On "grow" (a line on stdin):
 * cache_insert leaks 2 more and new_site leaks one 100-byte block starting
 * "NEWLEAK!"; then prints GROWN. The last block each site made is dropped
 * before READY so no register or stack slot keeps it. */
#include "../../scan/programs/scenario.h"

void *volatile sink;

/* Built with -DPAD: the same program with its code at other addresses, as
 * after a rebuild (64 bytes of nops before each allocation). */
#ifdef PAD
#define PADDING() __asm__ volatile(".skip 64, 0x90")
#else
#define PADDING() ((void)0)
#endif

__attribute__((noinline)) static void load_config(void) {
  PADDING();
  char *s = malloc(31);
  memcpy(s, "listen=127.0.0.1:8080 workers=", 31);
  sink = s;
  sink = NULL;
}

__attribute__((noinline)) static void cache_insert(int n) {
  PADDING();
  for (int i = 0; i < n; i++) {
    char *p = malloc(48);
    memset(p, 'c', 48);
    sink = p;
  }
  sink = NULL;
}

__attribute__((noinline)) static void new_site(void) {
  PADDING();
  char *p = malloc(100);
  memset(p, 0, 100);
  memcpy(p, "NEWLEAK!", 8);
  sink = p;
  sink = NULL;
}

int main(void) {
  load_config();
  cache_insert(3);
  wipe();
  ready("leak_count=4 leak_bytes=175");
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "grow", 4) == 0) {
      cache_insert(2);
      new_site();
      wipe();
      printf("GROWN leak_count=7 leak_bytes=371\n");
      fflush(stdout);
    }
  }
  return 0;
}
