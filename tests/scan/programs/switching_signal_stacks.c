/* A thread that keeps changing its alternate signal stack, as a runtime
 * that gives each task its own might: every ~0.3 ms it mallocs a new
 * 13,504-byte stack, installs it with sigaltstack() and frees the one it
 * replaced, keeping no pointer to the new one (only the kernel holds it).
 * malloc hands back the chunk just freed, so the stacks alternate between
 * two chunks. One plain block leaks. On each line from the test the
 * program answers "switches=N", the switches made so far. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "scenario.h"

#define STACK_SIZE 13504

static atomic_long switches;

/* Out of line: its frame, with the new stack's address, is dead below the
 * caller's SP once it returns. */
__attribute__((noinline)) static void switch_stack(void) {
  stack_t old, ss = {.ss_size = STACK_SIZE};
  if (sigaltstack(NULL, &old) != 0) exit(1);
  ss.ss_sp = malloc(STACK_SIZE);
  if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0) exit(1);
  free(old.ss_sp);
  memset(&ss, 0, sizeof ss);
  KEEP(&ss);
}

static void *switcher(void *arg) {
  (void)arg;
  struct timespec nap = {0, 300000};
  for (;;) {
    switch_stack();
    clear_scratch_registers();
    atomic_fetch_add(&switches, 1);
    nanosleep(&nap, NULL);
  }
  return NULL;
}

int main(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, switcher, NULL) != 0) return 1;
  while (atomic_load(&switches) < 2) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  KEEP(malloc(40));
  wipe();
  ready("leak_count=1 leak_bytes=40 threads=2");
  char c;
  while (read(0, &c, 1) > 0) {
    if (c != '\n') continue;
    char out[64];
    int n = snprintf(out, sizeof out, "switches=%ld\n", atomic_load(&switches));
    if (write(1, out, (size_t)n) < 0) _exit(99);
  }
  return 0;
}
