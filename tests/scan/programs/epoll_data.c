/* The only pointers to two blocks are epoll registrations' data: the
 * program hands them to the kernel with epoll_ctl and gets them back from
 * epoll_wait, as event loops do with their connection objects. One block
 * is dropped. */
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "scenario.h"

static void watch(int ep, void *conn) {
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = conn};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, eventfd(0, 0), &ev) != 0) exit(1);
  memset(&ev, 0, sizeof ev);
  KEEP(&ev);
}

int main(void) {
  int ep = epoll_create1(0);
  watch(ep, malloc(40));
  watch(ep, malloc(72));
  KEEP(malloc(24));
  wipe();
  ready("leak_count=1 leak_bytes=24");
  wait_for_test();
  return 0;
}
