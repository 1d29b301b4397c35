/* A thread that ends inside realloc: a worker reallocs in a loop, and the
 * main thread signals it until the handler finds it inside realloc in the
 * shim's code (its slot announcing UR_OP_REALLOC); the handler then ends
 * the thread, with pthread_exit (argv[1] "pthread_exit") or with the raw
 * exit system call, as a thread killed mid-call ("raw": no destructor
 * runs, glibc never learns). Once the thread is gone it prints
 * "DEAD tid=T op=O state=S" (its slot's), then with argv[2] "disable"
 * calls malloc_disable and malloc_enable, which wait out every thread
 * inside the allocator (an alarm ends a wait that never ends), and prints
 * "ENABLED op=O state=S"; else prints "READY tid=T" and waits for stdin
 * to close, to be scanned. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>

#include "shimtest.h"

static uintptr_t text_lo, text_hi; /* the shim's code */
static struct ur_thread_slot *worker_slot;
static int raw, ready, died;
static pid_t worker_tid;

static void on_usr1(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  uintptr_t pc = (uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
  if (pc < text_lo || pc >= text_hi) return;
  if (__atomic_load_n(&worker_slot->op, __ATOMIC_RELAXED) != UR_OP_REALLOC) return;
  __atomic_store_n(&died, 1, __ATOMIC_RELEASE);
  if (raw) syscall(SYS_exit, 0);
  pthread_exit(NULL);
}

static void *work(void *arg) {
  (void)arg;
  worker_tid = gettid();
  void *p = malloc(64);
  worker_slot = my_slot();
  CHECK(worker_slot != NULL);
  __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
  /* Grown: moved by the shim (move_block); shrunk: in place, by glibc. */
  for (size_t i = 0;; i++) p = realloc(p, 64 + (i & 1) * 4000);
  return p;
}

static int task_exists(pid_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d", (int)tid);
  return access(path, F_OK) == 0;
}

int main(int argc, char **argv) {
  CHECK(argc > 1);
  setvbuf(stdout, NULL, _IONBF, 0);
  raw = strcmp(argv[1], "raw") == 0;
  shim_text(&text_lo, &text_hi);
  CHECK(text_hi > text_lo);
  struct sigaction sa = {0};
  sa.sa_sigaction = on_usr1;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, work, NULL) == 0);
  while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) sched_yield();
  while (!__atomic_load_n(&died, __ATOMIC_ACQUIRE)) {
    pthread_kill(t, SIGUSR1);
    sched_yield();
  }
  if (raw) {
    while (task_exists(worker_tid)) sched_yield();
  } else {
    CHECK(pthread_join(t, NULL) == 0);
  }
  printf("DEAD tid=%d op=%u state=%u\n", (int)worker_tid, worker_slot->op, worker_slot->state);
  if (argc > 2 && strcmp(argv[2], "disable") == 0) {
    alarm(30);
    SHIM_FN(malloc_disable)();
    SHIM_FN(malloc_enable)();
    alarm(0);
    printf("ENABLED op=%u state=%u\n", worker_slot->op, worker_slot->state);
    return 0;
  }
  printf("READY tid=%d\n", (int)worker_tid);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
