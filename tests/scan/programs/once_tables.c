/* syslog-ng's heap, in small: a library's tables built once, on first use
 * (OpenSSL's names and error strings, built by the first RAND_bytes:
 * thousands of blocks of 1 to 24 bytes, each a 32-byte chunk, a hash node
 * of 24 bytes beside each name), and worker threads that come and go, each
 * with an arena of its own, freed blocks left in its tcache and fastbins,
 * and a thread-local cache whose strdup'ed "UTC" is lost as it exits.
 * With "fresh" as argument the tables are built (syslog-ng without its
 * persist file makes its host id so; with one it never calls OpenSSL).
 * One worker stays, its cache live; the exited ones leak 4 bytes each. */
#include <pthread.h>

#include "scenario.h"

#define NAMES 2000
#define EXITED 4

struct node { /* 24 bytes: OPENSSL_LH_NODE's shape */
  char *name;
  struct node *next;
  unsigned long hash;
};

static struct node *volatile g_table[64];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
__thread char *t_zone; /* cached_localtime's per-thread cache; external: the store must not be elided */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_started;

static void build_tables(void) {
  for (unsigned long i = 0; i < NAMES; i++) {
    size_t len = 1 + i % 24;
    char *name = malloc(len);
    memset(name, 'a' + (int)(i % 26), len - 1);
    name[len - 1] = 0;
    struct node *n = malloc(sizeof *n);
    n->name = name;
    n->hash = i * 2654435761u;
    n->next = g_table[n->hash % 64];
    g_table[n->hash % 64] = n;
  }
}

/* Blocks freed by a worker: some stay in its tcache, some in fastbins and
 * the bins of its arena. */
static void churn(void) {
  void *kept[300];
  for (int i = 0; i < 300; i++) kept[i] = malloc(8 + (size_t)(i % 40) * 8);
  for (int i = 0; i < 300; i += 2) free(kept[i]);
  for (int i = 1; i < 300; i += 2) free(kept[i]);
}

static void *worker(void *fresh) {
  if (fresh) pthread_once(&g_once, build_tables);
  t_zone = strdup("UTC");
  churn();
  return NULL;
}

static void *staying(void *fresh) {
  worker(fresh);
  pthread_mutex_lock(&g_lock);
  g_started = 1;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_lock);
  for (;;) pause();
  return NULL;
}

int main(int argc, char **argv) {
  void *fresh = argc > 1 && strcmp(argv[1], "fresh") == 0 ? argv[1] : NULL;
  pthread_t t;
  for (int i = 0; i < EXITED; i++) {
    if (pthread_create(&t, NULL, worker, fresh) != 0 || pthread_join(t, NULL) != 0) return 1;
  }
  if (pthread_create(&t, NULL, staying, fresh) != 0) return 1;
  pthread_mutex_lock(&g_lock);
  while (!g_started) pthread_cond_wait(&g_cond, &g_lock);
  pthread_mutex_unlock(&g_lock);
  wipe();
  ready("leak_count=%d leak_bytes=%d", EXITED, EXITED * 4);
  wait_for_test();
  return 0;
}
