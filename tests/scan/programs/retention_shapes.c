/* Graph shapes with known dominators, all blocks of distinct sizes:
 *   g_one -> A(16); A -> B(24), C(32); B -> D(40), H(72); C -> D; D -> E(48);
 *   E -> D (a cycle). A dominates B, C, D, E: g_one retains 160 bytes in 5.
 *   g_two -> F(56); F -> G(64), H. H is reached from both globals and
 *   retained by neither: 72 shared bytes. g_two retains F and G: 120 in 2.
 *   g_chain -> a list of 200,000 8-byte blocks: 1,600,000 bytes, as deep
 *   as the dominator tree gets here.
 * The target runs without backtraces: sites are sizes. */
#include "scenario.h"

void *g_one, *g_two, *g_chain; /* not static: stores the compiler keeps */

#define CHAIN 200000

static void **block(size_t n) {
  void **p = malloc(n);
  memset(p, 0, n);
  return p;
}

__attribute__((noinline)) static void build(char *text, size_t len) {
  void **a = block(16), **b = block(24), **c = block(32), **d = block(40), **e = block(48);
  void **f = block(56), **g = block(64), **h = block(72);
  a[0] = b, a[1] = c;
  b[0] = d, b[1] = h;
  c[0] = d;
  d[0] = e;
  e[0] = d;
  f[0] = g, f[1] = h;
  g_one = a;
  g_two = f;
  void **head = NULL;
  for (int i = 0; i < CHAIN; i++) {
    void **x = block(8);
    x[0] = head;
    head = x;
  }
  g_chain = head;
  snprintf(text, len, "a=%p b=%p c=%p d=%p e=%p f=%p g=%p h=%p one=%p two=%p", (void *)a,
           (void *)b, (void *)c, (void *)d, (void *)e, (void *)f, (void *)g, (void *)h,
           (void *)&g_one, (void *)&g_two);
}

int main(void) {
  static char text[512];
  build(text, sizeof text);
  wipe();
  ready("%s", text);
  wait_for_test();
  return 0;
}
