/* fork() from a multi-threaded program while every thread allocates: the
 * child allocates, sees its own pid in the descriptor, gets a snapshot helper
 * on demand, and exits cleanly; the parent carries on unaffected. A child
 * that does not allocate gets no helper. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "shimtest.h"

static atomic_int stop;

static void *churn(void *arg) {
  (void)arg;
  void *keep[64] = {0};
  unsigned i = 0;
  while (!atomic_load(&stop)) {
    free(keep[i % 64]);
    keep[i % 64] = malloc(16 + i % 500);
    i++;
  }
  for (int k = 0; k < 64; k++) free(keep[k]);
  return NULL;
}

static int helper_alive(uint32_t tid) {
  char path[64], comm[32] = {0};
  snprintf(path, sizeof path, "/proc/self/task/%u/comm", tid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int ok = fgets(comm, sizeof comm, f) && strcmp(comm, "ur-helper\n") == 0;
  fclose(f);
  return ok;
}

static uint32_t wait_helper(struct ur_descriptor *d) {
  for (int i = 0; i < 2000 && !__atomic_load_n(&d->helper_tid, __ATOMIC_ACQUIRE); i++)
    usleep(1000);
  return d->helper_tid;
}

int main(void) {
  struct ur_descriptor *d = shim_desc();
  CHECK(d->enabled && d->pid == (uint64_t)getpid());
  uint32_t parent_helper = wait_helper(d);
  CHECK(parent_helper && helper_alive(parent_helper));
  pthread_t th[4];
  for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, churn, NULL);

  for (int round = 0; round < 20; round++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      if (d->pid != (uint64_t)getpid() || d->helper_tid != 0) _exit(10);
      void *blocks[1000];
      for (int i = 0; i < 1000; i++) blocks[i] = malloc((size_t)i + 1);
      for (int i = 0; i < 1000; i++)
        if (!registered_with_size(blocks[i], (uint64_t)i + 1)) _exit(11);
      for (int i = 0; i < 1000; i++) free(blocks[i]);
      uint32_t h = wait_helper(d);
      if (!h || !helper_alive(h)) _exit(12);
      struct ur_thread_slot *s = my_slot();
      if (!s || s->tid != (uint32_t)getpid()) _exit(13);
      exit(0); /* full exit: atexit handlers and stdio allocate and free */
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "child status %#x\n", status);
      return 1;
    }
  }

  /* A child that never allocates never pays for a helper. */
  pid_t pid = fork();
  if (pid == 0) {
    usleep(20000);
    _exit(d->helper_tid == 0 ? 0 : 20);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

  atomic_store(&stop, 1);
  for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
  void *p = malloc(77);
  CHECK(registered_with_size(p, 77));
  free(p);
  CHECK(d->pid == (uint64_t)getpid() && d->helper_tid == parent_helper);
  printf("OK\n");
  return 0;
}
