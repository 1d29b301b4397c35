/* sigaltstack() through the shim: the call behaves as glibc's, and the
 * descriptor's table records each thread's stack by tid (native/shim/
 * altstack.c), drops it when disabled, and follows the forking thread into
 * its child. */
#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "shimtest.h"

static const struct ur_altstack *entry_of(const struct ur_descriptor *d, pid_t tid) {
  const struct ur_altstack *t = (const struct ur_altstack *)(uintptr_t)d->altstacks;
  for (uint64_t i = 0; i < d->num_altstacks; i++)
    if (t[i].tid == (uint32_t)tid) return &t[i];
  return NULL;
}

int main(void) {
  struct ur_descriptor *d = shim_desc();
  CHECK(d->altstacks && d->num_altstacks >= 64);
  CHECK(d->altstacks >= d->region_begin && d->altstacks < d->region_end);
  pid_t me = (pid_t)syscall(SYS_gettid);

  /* An error is glibc's error, and records nothing. */
  stack_t tiny = {.ss_sp = malloc(16), .ss_size = 16};
  errno = 0;
  CHECK(sigaltstack(&tiny, NULL) == -1 && errno == ENOMEM);
  CHECK(entry_of(d, me) == NULL || entry_of(d, me)->sp == 0);

  size_t size = 65536;
  stack_t ss = {.ss_sp = malloc(size), .ss_size = size}, old;
  CHECK(sigaltstack(&ss, NULL) == 0);
  const struct ur_altstack *e = entry_of(d, me);
  CHECK(e && e->sp == (uint64_t)(uintptr_t)ss.ss_sp && e->size == size);
  CHECK(sigaltstack(NULL, &old) == 0 && old.ss_sp == ss.ss_sp); /* a query changes nothing */
  CHECK(e->sp == (uint64_t)(uintptr_t)ss.ss_sp);

  pid_t child = fork();
  if (child == 0) {
    const struct ur_altstack *c = entry_of(d, getpid());
    int ok = c && c->sp == (uint64_t)(uintptr_t)ss.ss_sp && entry_of(d, me) == NULL;
    _exit(ok ? 0 : 1);
  }
  int status;
  CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);

  stack_t off = {.ss_flags = SS_DISABLE};
  CHECK(sigaltstack(&off, NULL) == 0 && e->sp == 0);
  free(ss.ss_sp);
  free(tiny.ss_sp);
  printf("OK\n");
  return 0;
}
