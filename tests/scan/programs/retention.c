/* Heap structures whose holders are known exactly, for `why` and
 * `retainers`:
 *   - a cache: a global hash table (g_cache, 16 buckets) of 40-byte
 *     entries, each owning a 100-byte value; bucket 5 chains three entries,
 *     bucket 9 holds one: g_cache retains 8 blocks, 560 bytes;
 *   - a list of four 32-byte nodes whose head lives only in a local of a
 *     thread's function: that thread's stack retains 4 blocks, 128 bytes;
 *   - a 64-byte connection owning a 200-byte buffer at offset 8, kept only
 *     by an epoll registration's data: 2 blocks, 264 bytes;
 *   - a leaked pair: a 48-byte block pointing at another at offset 16;
 *   - a 56-byte block kept only by a thread-local variable (tls_slot) of
 *     the list's thread, and an 88-byte one only by register r12 of a
 *     thread blocked in pause().
 * The READY line gives each block's address; nothing else keeps a pointer
 * to them (addresses travel as text). */
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "scenario.h"

struct entry {
  struct entry *next;
  char key[24];
  char *value;
};
_Static_assert(sizeof(struct entry) == 40, "entry size");

static struct entry *g_cache[16];

__attribute__((noinline)) static struct entry *cache_put(unsigned bucket, const char *key) {
  struct entry *e = malloc(sizeof *e);
  memset(e, 0, sizeof *e);
  strncpy(e->key, key, sizeof e->key - 1);
  e->value = malloc(100);
  memset(e->value, 'v', 100);
  e->next = g_cache[bucket];
  g_cache[bucket] = e;
  return e;
}

struct node {
  struct node *next;
  long payload[3];
};

__attribute__((noinline)) static struct node *make_list(int n) {
  struct node *head = NULL;
  for (int i = 0; i < n; i++) {
    struct node *x = malloc(sizeof *x);
    memset(x, 0, sizeof *x);
    x->next = head;
    head = x;
  }
  return head;
}

__thread void *tls_slot; /* not static: a store the compiler cannot drop */
static char list_text[256], reg_text[64];
static int list_ready[2];

__attribute__((noinline)) static void keep_in_tls(void) {
  tls_slot = malloc(56);
  memset(tls_slot, 0, 56);
}

/* Its frame, with the copies of the pointers it formats, is dead once it
 * returns: only hold_list's `head` keeps the list. */
__attribute__((noinline)) static void describe_list(struct node *volatile *at) {
  struct node *n = *at;
  snprintf(list_text, sizeof list_text, "head=%p n2=%p n3=%p n4=%p head_at=%p tls=%p list_tid=%d",
           (void *)n, (void *)n->next, (void *)n->next->next, (void *)n->next->next->next,
           (void *)at, tls_slot, gettid());
}

__attribute__((noinline)) static void hold_list(void) {
  struct node *volatile head = make_list(4);
  keep_in_tls();
  describe_list(&head);
  wipe();
  if (write(list_ready[1], "x", 1) != 1) exit(1);
  for (;;) pause();
}

static void *list_thread(void *arg) {
  (void)arg;
  hold_list();
  return NULL;
}

static int reg_ready[2];

/* The block's only pointer stays in r12 while the thread sleeps in the
 * pause system call (the kernel keeps a thread's registers as they were). */
static void *reg_thread(void *arg) {
  (void)arg;
  void *p = malloc(88);
  memset(p, 0, 88);
  snprintf(reg_text, sizeof reg_text, "reg=%p reg_tid=%d", p, gettid());
  register void *r12 __asm__("r12") = p;
  p = NULL;
  wipe();
  if (write(reg_ready[1], "x", 1) != 1) exit(1);
  for (;;) __asm__ volatile("mov $34, %%eax\n syscall" : "+r"(r12) : : "rax", "rcx", "r11", "memory");
  return NULL;
}

struct conn {
  int fd;
  char *buf;
  char pad[48];
};
_Static_assert(sizeof(struct conn) == 64, "conn size");

__attribute__((noinline)) static void watch(int ep, char *text, size_t len) {
  struct conn *c = malloc(sizeof *c);
  memset(c, 0, sizeof *c);
  c->fd = eventfd(0, 0);
  c->buf = malloc(200);
  memset(c->buf, 0, 200);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) exit(1);
  snprintf(text, len, "conn=%p buf=%p conn_fd=%d epoll_fd=%d", (void *)c, (void *)c->buf, c->fd,
           ep);
  memset(&ev, 0, sizeof ev);
  KEEP(&ev);
}

__attribute__((noinline)) static void leak(char *text, size_t len) {
  char **a = malloc(48);
  memset(a, 0, 48);
  a[2] = malloc(48);
  memset(a[2], 0, 48);
  snprintf(text, len, "leak=%p leaked=%p", (void *)a, (void *)a[2]);
}

/* In a function of its own: its frame, with the entries in it, is dead
 * (below SP) once it returns. */
__attribute__((noinline)) static void fill_cache(char *text, size_t len) {
  static const unsigned buckets[] = {5, 5, 5, 9};
  static const char *const keys[] = {"one", "two", "three", "four"};
  struct entry *e[4];
  /* One call site for every entry and every value: one allocation site each. */
  for (int i = 0; i < 4; i++) e[i] = cache_put(buckets[i], keys[i]);
  /* Bucket 5 now reads e[2] -> e[1] -> e[0] (each put goes in front): c1 c2 c3. */
  snprintf(text, len, "cache=%p c1=%p c2=%p c3=%p c4=%p c3_value=%p", (void *)g_cache,
           (void *)e[2], (void *)e[1], (void *)e[0], (void *)e[3], (void *)e[0]->value);
}

int main(void) {
  static char cache_text[256], conn_text[128], leak_text[128];
  fill_cache(cache_text, sizeof cache_text);
  int ep = epoll_create1(0);
  watch(ep, conn_text, sizeof conn_text);
  leak(leak_text, sizeof leak_text);
  if (pipe(list_ready) != 0) exit(1);
  pthread_t t;
  if (pthread_create(&t, NULL, list_thread, NULL) != 0) exit(1);
  char c;
  if (read(list_ready[0], &c, 1) != 1) exit(1);
  if (pipe(reg_ready) != 0 || pthread_create(&t, NULL, reg_thread, NULL) != 0) exit(1);
  if (read(reg_ready[0], &c, 1) != 1) exit(1);
  wipe();
  ready("%s %s %s %s %s", cache_text, list_text, conn_text, leak_text, reg_text);
  wait_for_test();
  return 0;
}
