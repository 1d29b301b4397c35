/* leak_track: blocks still live at exit are listed. */
#include "md.h"

void *keep[2];

int main(void) {
  keep[0] = malloc(100);
  keep[1] = malloc(24);
  say("big %p\nsmall %p\n", keep[0], keep[1]);
  return 0;
}
