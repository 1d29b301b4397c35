/* Erlang's VM mallocs an alternate signal stack for each thread (13,504
 * bytes), installs it with sigaltstack() and keeps no pointer to it: only
 * the kernel holds them. Four threads do so here, two asleep in pause()
 * and two in nanosleep() (restarted differently when interrupted); one
 * plain block leaks. On "signal" from the test, each thread is sent
 * SIGUSR1, whose handler asks the kernel whether it runs on its alternate
 * stack; the program answers "on_altstack=N" with the count.
 * argv[1] "refuse": a filter on every thread then kills the process on
 * sigaltstack(), so the stacks cannot be asked (the scan must say so and
 * leave the process running). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "../../support/c/seccomp_filter.h"
#include "scenario.h"

#ifndef THREADS
#define THREADS 4
#endif
#define STACK_SIZE 13504

static pthread_barrier_t set;
static atomic_int delivered, on_stack;

static void on_usr1(int sig) {
  (void)sig;
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_ONSTACK)) atomic_fetch_add(&on_stack, 1);
  atomic_fetch_add(&delivered, 1);
}

static void install_stack(void) {
  stack_t ss = {.ss_sp = malloc(STACK_SIZE), .ss_size = STACK_SIZE};
  if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0) exit(1);
  memset(&ss, 0, sizeof ss);
  KEEP(&ss);
}

static void *thread_main(void *arg) {
  install_stack();
  wipe();
  pthread_barrier_wait(&set);
  for (;;) {
    if ((uintptr_t)arg & 1) {
      struct timespec hour = {3600, 0};
      nanosleep(&hour, NULL);
    } else {
      pause();
    }
  }
  return NULL;
}

static void send_signals(const pthread_t *t) {
  atomic_store(&delivered, 0);
  atomic_store(&on_stack, 0);
  for (int i = 0; i < THREADS; i++) pthread_kill(t[i], SIGUSR1);
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 10000 && atomic_load(&delivered) < THREADS; i++) nanosleep(&ms, NULL);
  char out[64];
  int n = snprintf(out, sizeof out, "on_altstack=%d\n", atomic_load(&on_stack));
  if (write(1, out, (size_t)n) < 0) _exit(99);
}

int main(int argc, char **argv) {
  struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  pthread_barrier_init(&set, NULL, THREADS + 1);
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, thread_main, (void *)i);
  pthread_barrier_wait(&set);
  if (argc > 1 && strcmp(argv[1], "refuse") == 0 &&
      refuse_call(SYS_sigaltstack, SECCOMP_RET_KILL_PROCESS, FILTER_SYSCALL,
                  SECCOMP_FILTER_FLAG_TSYNC) != 0)
    return 1;
  KEEP(malloc(40));
  wipe();
  ready("leak_count=1 leak_bytes=40 threads=%d", THREADS + 1);
  char c;
  while (read(0, &c, 1) > 0)
    if (c == '\n') send_signals(t);
  return 0;
}
