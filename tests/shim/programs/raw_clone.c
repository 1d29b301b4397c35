/* Session processes made as vsftpd makes them: by syscall(SYS_clone, ...)
 * without CLONE_VM, past glibc's fork() and so past every fork handler,
 * while four threads allocate and free. glibc's list of threads in such a
 * child is still the parent's (nothing told it of the fork). Each child
 * allocates, drops one block of LEAK_SIZE bytes, allocates and frees, calls
 * setgroups() (glibc's set*id broadcast walks that list: as root the call
 * succeeds, else it fails with EPERM, either way past the broadcast), and
 * waits. argv[1] the call:
 *   clone    SIGCHLD only
 *   newipc   CLONE_NEWIPC | SIGCHLD (vsftpd's)
 *   newpid   CLONE_NEWPID | SIGCHLD (the child is 1 in its namespace)
 *   parent   CLONE_PARENT | SIGCHLD (the child is the caller's sibling)
 *   clone3   clone3() with CLONE_NEWIPC, exit signal SIGCHLD
 *   files    CLONE_FILES | SIGCHLD (the child shares the descriptor table)
 * argv[2] how many children; argv[3] "grandchild": each quiet child (below)
 * also forks (glibc's fork()) a grandchild, which drops a block of
 * GRANDCHILD_LEAK bytes and prints "GRANDCHILD pid=<pid> leak=<address>
 * size=<bytes>". Not the others: glibc's fork() takes every arena's lock,
 * and a thread the child lacks may have held one at the clone (glibc's
 * locks, which no fork handler of glibc's took: the shim or not).
 * Each child prints
 * "CHILD pid=<its pid as /proc names it> leak=<address> size=<bytes>
 * setgroups=<0 or errno> quiet=<1: cloned with the threads parked>"; then
 * the parent prints READY; every process waits for stdin to close. */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "../../scan/programs/scenario.h"

#define LEAK_SIZE 4321
#define GRANDCHILD_LEAK 1234
#define MASK ((uintptr_t)0x5a5a5a5a5a5a5a5aULL) /* the address, never held as itself */
#define THREADS 4

/* clone3's argument, as the kernel's uapi has it (its first 64 bytes). */
struct clone3_args {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static volatile int stopping, parking;
static int started, parked;
/* The threads' blocks, in .bss: reachable in every child too. */
static void *held[THREADS][64];

/* Between two blocks nothing of a thread's is in a register alone, so a
 * child cloned while every thread waits here (parked) inherits no block
 * that only a thread it lacks knew of: its one leak is its own. */
static void park_here(void) {
  __atomic_fetch_add(&parked, 1, __ATOMIC_ACQ_REL);
  while (parking) sched_yield();
  __atomic_fetch_sub(&parked, 1, __ATOMIC_ACQ_REL);
}

static void *churn(void *arg) {
  unsigned t = (unsigned)(uintptr_t)arg, seed = t + 1;
  __atomic_fetch_add(&started, 1, __ATOMIC_RELEASE);
  while (!stopping) {
    if (parking) park_here();
    unsigned i = (unsigned)rand_r(&seed) % 64;
    free(held[t][i]);
    held[t][i] = malloc(16 + (size_t)rand_r(&seed) % 2000);
  }
  for (unsigned i = 0; i < 64; i++) free(held[t][i]);
  return NULL;
}

static long raw_clone(const char *how) {
  if (strcmp(how, "clone3") == 0) {
    struct clone3_args a = {.flags = CLONE_NEWIPC, .exit_signal = SIGCHLD};
    return syscall(SYS_clone3, &a, sizeof a);
  }
  unsigned long flags = SIGCHLD;
  if (strcmp(how, "newipc") == 0) flags |= CLONE_NEWIPC;
  if (strcmp(how, "newpid") == 0) flags |= CLONE_NEWPID;
  if (strcmp(how, "parent") == 0) flags |= CLONE_PARENT;
  if (strcmp(how, "files") == 0) flags |= CLONE_FILES;
  return syscall(SYS_clone, flags, NULL, NULL, NULL, 0);
}

/* The pid /proc names us by (getpid() is 1 in a new pid namespace). */
static int proc_pid(void) {
  char buf[32] = {0};
  ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);
  return n > 0 ? atoi(buf) : -1;
}

__attribute__((noinline)) static uintptr_t drop_leak(size_t size) {
  char *p = malloc(size);
  if (!p) _exit(3);
  memset(p, 0x33, size);
  uintptr_t masked = (uintptr_t)p ^ MASK;
  KEEP(p);
  return masked;
}

/* A fork() through glibc, which makes glibc forget the threads its parent
 * never had: the shim starts a helper here again. */
static void grandchild(void) {
  fflush(stdout);
  /* Its line is written before its parent's "done": the test reads lines
   * until READY, which follows every child's done. */
  int said[2];
  if (pipe(said) != 0) _exit(5);
  pid_t pid = fork();
  if (pid != 0) {
    char c;
    close(said[1]);
    if (pid < 0 || read(said[0], &c, 1) != 1) _exit(5);
    close(said[0]);
    return;
  }
  close(said[0]);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  uintptr_t masked = drop_leak(GRANDCHILD_LEAK);
  wipe();
  char line[160] = {0};
  int n = snprintf(line, sizeof line, "GRANDCHILD pid=%d leak=%#lx size=%d\n", proc_pid(),
                   (unsigned long)(masked ^ MASK), GRANDCHILD_LEAK);
  masked = 0;
  if (write(1, line, (size_t)n) != n || write(said[1], "g", 1) != 1) _exit(4);
  close(said[1]);
  memset(line, 0, sizeof line);
  wipe();
  wait_for_test();
  _exit(0);
}

__attribute__((noreturn)) static void child(int done_fd, int quiet, int fork_one) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  uintptr_t masked = drop_leak(LEAK_SIZE);
  wipe();
  int err = setgroups(0, NULL) == 0 ? 0 : errno;
  for (size_t i = 1; i <= 100; i++) free(malloc(i * 40));
  char line[160] = {0};
  int n = snprintf(line, sizeof line, "CHILD pid=%d leak=%#lx size=%d setgroups=%d quiet=%d\n",
                   proc_pid(), (unsigned long)(masked ^ MASK), LEAK_SIZE, err, quiet);
  masked = 0;
  if (fork_one && quiet) grandchild();
  if (write(1, line, (size_t)n) != n || write(done_fd, "c", 1) != 1) _exit(4);
  memset(line, 0, sizeof line);
  wipe();
  wait_for_test();
  _exit(0);
}

int main(int argc, char **argv) {
  const char *how = argc > 1 ? argv[1] : "newipc";
  int children = argc > 2 ? atoi(argv[2]) : 4;
  int fork_one = argc > 3 && strcmp(argv[3], "grandchild") == 0;
  int done[2];
  if (pipe(done) != 0) return 2;
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)i) != 0) return 2;
  /* glibc marks a thread it has cloned but which has not yet run as not
   * ready for set*id(); a child cloned meanwhile keeps that mark for a
   * thread it does not have, and its setgroups() waits for it forever
   * (the shim or not). */
  while (__atomic_load_n(&started, __ATOMIC_ACQUIRE) < THREADS) sched_yield();
  for (int i = 0; i < children; i++) {
    /* Every other child cloned with the threads parked, the rest while
     * they allocate and free (and may hold the shim's locks). */
    int quiet = i % 2;
    if (quiet) {
      parking = 1;
      while (__atomic_load_n(&parked, __ATOMIC_ACQUIRE) < THREADS) sched_yield();
    }
    long pid = raw_clone(how);
    if (pid == 0) child(done[1], quiet, fork_one);
    parking = 0;
    if (pid < 0) {
      printf("READY error=%d\n", errno);
      fflush(stdout);
      return 2;
    }
  }
  char c;
  for (int i = 0; i < children; i++)
    if (read(done[0], &c, 1) != 1) return 2;
  ready("children=%d", children);
  wait_for_test();
  stopping = 1;
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  return 0;
}
