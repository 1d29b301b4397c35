/* Shared helpers for the malloc_debug option programs: output through
 * dprintf (stdio's stdout buffer would be an allocation of its own), and
 * waiting without allocating. */
#ifndef MD_H
#define MD_H

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Keeps the compiler from proving a store dead or a block unused. */
#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

/* printf to stdout through a stack buffer: dprintf would malloc a buffer. */
__attribute__((format(printf, 1, 2), unused)) static void say(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
  if (n > 0 && write(1, buf, (size_t)n) < 0) _exit(3);
}

static inline void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Wait until the test writes a line (or closes stdin); no allocation. */
static inline void wait_line(void) {
  char c;
  while (read(0, &c, 1) > 0 && c != '\n') {
  }
}

static inline unsigned tid(void) { return (unsigned)syscall(SYS_gettid); }

#endif
