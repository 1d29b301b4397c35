/* A sandboxed program: it moves into a user namespace of its own first
 * (bwrap, crun and `unshare -U` do), which needs a process of one thread,
 * so the shim's helper steps aside for the call and a new one starts as it
 * returns; scans then snapshot as usual. One list kept, one
 * dropped. Without user namespaces on the machine it runs without one. */
#include <sched.h>

#include "scenario.h"

struct node {
  struct node *next;
  char pad[40];
};

struct node *kept; /* not static: the store must stay */

__attribute__((noinline)) static struct node *list(int n) {
  struct node *head = NULL;
  for (int i = 0; i < n; i++) {
    struct node *e = calloc(1, sizeof *e);
    e->next = head;
    head = e;
  }
  return head;
}

int main(void) {
  int in_namespace = unshare(CLONE_NEWUSER) == 0;
  kept = list(5);
  KEEP(list(3));
  wipe();
  ready("leak_count=3 leak_bytes=%zu user_namespace=%d", 3 * sizeof(struct node), in_namespace);
  wait_for_test();
  return 0;
}
