/* A connection the program closes while a fork snapshot of it exists: an
 * event loop that lets close() take a socket out of its epoll set (haproxy
 * does) needs the close to be the last reference, and the peer to see the
 * end of the stream at once. On "close" (a line on stdin): closes its end
 * of a socketpair made at start and says what the other end sees. */
#include <errno.h>
#include <sys/socket.h>

#include "../../scan/programs/scenario.h"

int main(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 3;
  ready("fd=%d", sv[0]);
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "close", 5) == 0) {
      close(sv[0]);
      char c;
      ssize_t n = recv(sv[1], &c, 1, MSG_DONTWAIT);
      printf("peer=%s\n", n == 0 ? "eof" : n < 0 && errno == EAGAIN ? "open" : "other");
      fflush(stdout);
    }
  }
  return 0;
}
