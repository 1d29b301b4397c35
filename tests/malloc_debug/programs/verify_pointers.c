/* verify_pointers: free, realloc and malloc_usable_size of a pointer that is
 * not a live allocation are reported and do nothing. */
#include <malloc.h>

#include "md.h"

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  char *block = malloc(100);
  char *bogus = block + 16;
  say("bogus %p\n", (void *)bogus);
  if (!strcmp(mode, "free")) {
    free(bogus);
  } else if (!strcmp(mode, "realloc")) {
    say("realloc %p\n", realloc(bogus, 10));
  } else if (!strcmp(mode, "usable")) {
    say("usable %zu\n", malloc_usable_size(bogus));
  } else if (!strcmp(mode, "double")) {
    say("block %p\n", (void *)block);
    free(block);
    free(block); /* with free_track: USED AFTER FREE; without: UNKNOWN POINTER */
    block = malloc(100);
  }
  block[0] = 1; /* the block itself is untouched */
  free(block);
  say("done\n");
  return 0;
}
