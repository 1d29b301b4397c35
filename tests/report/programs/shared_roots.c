/* Dropped structures whose blocks more than one leak reaches: two roots
 * sharing a child (one nearer than the other), two roots as near to a
 * child, a cycle of two blocks allocated at one call site (one backtrace)
 * with a block below both, and a cycle of two roots with a tail. Each block
 * is allocated by a function of its own, so each leak has a stack of its
 * own in every export. */
#include "../../scan/programs/scenario.h"

struct node {
  struct node *a, *b;
  char pad[16];
};

#define SITE(name)                                                          \
  __attribute__((noinline)) static struct node *name(size_t extra) {       \
    struct node *n = calloc(1, sizeof(struct node) + extra);               \
    KEEP(n);                                                                \
    return n;                                                               \
  }

SITE(near_root)
SITE(far_root)
SITE(far_middle)
SITE(shared_child)
SITE(shared_grandchild)
SITE(tie_root_a)
SITE(tie_root_b)
SITE(tie_child)
SITE(twin)
SITE(twin_child)
SITE(cycle_head)
SITE(cycle_member)
SITE(tail_first)
SITE(tail_second)

__attribute__((noinline)) static void setup(void) {
  /* near -> shared -> grandchild, far -> middle -> shared */
  struct node *near = near_root(1000), *far = far_root(1100);
  far->a = far_middle(100);
  near->a = far->a->a = shared_child(200);
  near->a->a = shared_grandchild(300);
  /* both roots one pointer from the child */
  struct node *ta = tie_root_a(1200), *tb = tie_root_b(1300);
  ta->a = tb->a = tie_child(400);
  /* a cycle of two twins (one call site, one backtrace), a block below both */
  struct node *tw[2];
  volatile int twins = 2; /* not unrolled: one call site */
  for (int i = 0; i < twins; i++) tw[i] = twin(500);
  tw[0]->a = tw[1];
  tw[1]->a = tw[0];
  tw[0]->b = tw[1]->b = twin_child(600);
  /* head <-> member -> first -> second */
  struct node *head = cycle_head(700), *member = cycle_member(800);
  head->a = member;
  member->a = head;
  member->b = tail_first(900);
  member->b->a = tail_second(950);
  KEEP(near);
  KEEP(far);
  KEEP(ta);
  KEEP(tb);
  KEEP(tw[0]);
  KEEP(head);
}

int main(void) {
  setup();
  wipe();
  int bytes = 15 * 32 + 1000 + 1100 + 100 + 200 + 300 + 1200 + 1300 + 400 + 2 * 500 + 600 + 700 +
              800 + 900 + 950;
  ready("leak_count=15 leak_bytes=%d", bytes);
  wait_for_test();
  return 0;
}
