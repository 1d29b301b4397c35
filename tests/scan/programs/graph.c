/* Dropped structures: a chain, a tree, a cycle and a self-pointing block,
 * beside kept ones. Each folds into a known number of report entries. */
#include "scenario.h"

struct node {
  struct node *a, *b;
  char pad[16];
};

static struct node *mk(size_t extra) {
  struct node *n = calloc(1, sizeof(struct node) + extra);
  return n;
}

struct node *g_kept_chain;

__attribute__((noinline)) static void setup(void) {
  /* kept: chain of 3 from a global */
  g_kept_chain = mk(0);
  g_kept_chain->a = mk(0);
  g_kept_chain->a->a = mk(0);
  /* leaked chain of 3 (32+8, 32+16, 32+24 bytes) */
  struct node *c = mk(8);
  c->a = mk(16);
  c->a->a = mk(24);
  /* leaked tree: root with two children, each with one child (5 nodes of 32+100) */
  struct node *t = mk(100);
  t->a = mk(100);
  t->b = mk(100);
  t->a->a = mk(100);
  t->b->a = mk(100);
  /* leaked 2-cycle (32+200 each) */
  struct node *x = mk(200), *y = mk(200);
  x->a = y;
  y->a = x;
  /* leaked self-pointing block (32+300) */
  struct node *s = mk(300);
  s->a = s;
  KEEP(c);
  KEEP(t);
  KEEP(x);
  KEEP(s);
}

int main(void) {
  setup();
  wipe();
  /* 3 + 5 + 2 + 1 = 11 blocks; bytes: 3*32+48 + 5*132 + 2*232 + 332 */
  ready("leak_count=11 leak_bytes=%d entries=5", 3 * 32 + 48 + 5 * 132 + 2 * 232 + 332);
  wait_for_test();
  return 0;
}
