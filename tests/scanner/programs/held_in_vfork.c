/*
 * Target for the order of a stop: the main thread runs (spins), a second
 * thread is held in vfork() until its child has read a byte from stdin, so
 * it cannot reach a ptrace stop before the test lets it (a vfork parent's
 * wait is not woken by PTRACE_INTERRUPT).
 *
 * Usage: held_in_vfork
 * Prints "ready TID" (the thread in vfork) once the child waits.
 */
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile pid_t held_tid;
static volatile unsigned long spins;

static void *hold(void *arg) {
  (void)arg;
  held_tid = (pid_t)syscall(SYS_gettid);
  if (vfork() == 0) {
    char c;
    /* Shares the parent's memory: only system calls until _exit. */
    (void)!read(0, &c, 1);
    _exit(0);
  }
  for (;;) pause();
  return NULL;
}

int main(void) {
  pthread_t t;
  setvbuf(stdout, NULL, _IONBF, 0);
  pthread_create(&t, NULL, hold, NULL);
  while (!held_tid) spins++;
  printf("ready %d\n", (int)held_tid);
  for (;;) spins++;
}
