/* A child of this process holding memory for a reader to read: it writes
 * base[i] = byte(i) for i in [lo, hi) (those pages become its own, the rest
 * stay shared copy-on-write with this process), makes the page at locked
 * PROT_NONE, then waits in a read until end_holder. */
#ifndef FORKED_HOLDER_H
#define FORKED_HOLDER_H

#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit_test.h"

struct holder {
  pid_t pid;
  int done; /* closed by end_holder: the child's read ends */
};

static inline struct holder start_holder(uint8_t *base, size_t lo, size_t hi,
                                         uint8_t (*byte)(size_t), uint8_t *locked) {
  int ready[2], done[2];
  CHECK(pipe(ready) == 0 && pipe(done) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(done[1]);
    for (size_t i = lo; i < hi; i++) base[i] = byte(i);
    mprotect(locked, 4096, PROT_NONE);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    while (read(done[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  close(done[0]);
  close(ready[1]);
  char c;
  CHECK(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  return (struct holder){pid, done[1]};
}

static inline void end_holder(struct holder h) {
  close(h.done);
  waitpid(h.pid, NULL, 0);
}

#endif
