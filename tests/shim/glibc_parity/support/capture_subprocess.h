/* glibc's support/capture_subprocess.h subset: run a callback in a forked
 * child and collect its stdout, stderr and wait status. Written for this
 * project. */
#ifndef SUPPORT_CAPTURE_SUBPROCESS_H
#define SUPPORT_CAPTURE_SUBPROCESS_H

#include <stddef.h>
#include <stdio.h> /* as glibc's, through xmemstream.h */

struct xmemstream {
  char *buffer;
  size_t length;
};

struct support_capture_subprocess {
  struct xmemstream out;
  struct xmemstream err;
  int status;
};

struct support_capture_subprocess support_capture_subprocess(void (*callback)(void *),
                                                             void *closure);
void support_capture_subprocess_free(struct support_capture_subprocess *p);

#endif
