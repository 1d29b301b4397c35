/* Prints where glibc's unsorted bin is (in main_arena: 0x60 into it, 0x8
 * from glibc 2.43), learned from a chunk in it (whose fd points at the bin),
 * then takes the chunk back so that every bin is empty again: the layout in
 * which a copy of the bins' fingerprint, shifted down by whole bins, matches
 * first. Run with the tcache off (glibc.malloc.tcache_count=0): from 2.42
 * it holds chunks of 2000 bytes too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Called through volatile pointers: gcc would drop a malloc/free pair. */
static void *(*volatile alloc)(size_t) = malloc;
static void (*volatile release)(void *) = free;

int main(void) {
  char *p = alloc(2000); /* no fastbin size: freed into the unsorted bin */
  void *guard = alloc(32); /* keeps p from merging into top */
  uintptr_t at = (uintptr_t)p;
  release(p);
  /* Reading the freed chunk's fd is the point of this program. */
  uintptr_t bin = *(volatile uintptr_t *)at;
  char *again = alloc(2000); /* the exact fit: the unsorted bin is empty again */
  printf("READY unsorted_bin=%#lx same=%d\n", (unsigned long)bin, (uintptr_t)again == at);
  fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  release(guard);
  release(again);
  return 0;
}
