/* Blocks whose only pointer is in flight: written to a pipe or a unix
 * socket and not yet read, as threads hand work to each other. A pipe, a
 * stream and a datagram socketpair, a pipe full to its capacity (a pointer
 * first and last), and a pointer at an odd offset of a pipe's stream. One
 * block leaks. On "read" the program reads every queue back and says
 * whether it got exactly what it wrote. */
#include <fcntl.h>
#include <sys/socket.h>

#include "scenario.h"

struct queue {
  int rd, wr;
  unsigned char sent[1 << 17];
  size_t len;
};

static struct queue q_pipe, q_stream, q_dgram, q_full, q_odd;

static void put(struct queue *q, const void *data, size_t n) {
  if (write(q->wr, data, n) != (ssize_t)n) exit(3);
  /* Kept inverted: a copy of a pointer here would be a root. */
  const unsigned char *bytes = data;
  for (size_t i = 0; i < n; i++) q->sent[q->len + i] = (unsigned char)~bytes[i];
  q->len += n;
}

static void put_block(struct queue *q, size_t size) {
  void *p = malloc(size);
  memset(p, 0x5a, size);
  put(q, &p, sizeof p);
  p = NULL;
  KEEP(&p);
}

static void make_pipe(struct queue *q) {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK) != 0) exit(2);
  q->rd = fds[0];
  q->wr = fds[1];
}

static void make_pair(struct queue *q, int type) {
  int fds[2];
  if (socketpair(AF_UNIX, type, 0, fds) != 0) exit(2);
  q->rd = fds[0];
  q->wr = fds[1];
}

static int read_back(struct queue *q, int is_socket) {
  unsigned char got[sizeof q->sent];
  size_t have = 0;
  for (;;) {
    ssize_t n = is_socket ? recv(q->rd, got + have, sizeof got - have, MSG_DONTWAIT)
                          : read(q->rd, got + have, sizeof got - have);
    if (n <= 0) break;
    have += (size_t)n;
  }
  for (size_t i = 0; i < have; i++) got[i] = (unsigned char)~got[i];
  return have == q->len && memcmp(got, q->sent, have) == 0;
}

int main(void) {
  make_pipe(&q_pipe);
  put_block(&q_pipe, 40);

  make_pair(&q_stream, SOCK_STREAM);
  put_block(&q_stream, 56);

  make_pair(&q_dgram, SOCK_DGRAM);
  put_block(&q_dgram, 72);
  put_block(&q_dgram, 88);

  make_pipe(&q_full);
  int capacity = fcntl(q_full.wr, F_GETPIPE_SZ);
  static unsigned char all[1 << 17]; /* one write: a pointer, zeros, a pointer */
  void *first = malloc(104), *last = malloc(120);
  memcpy(all, &first, sizeof first);
  memcpy(all + capacity - sizeof last, &last, sizeof last);
  put(&q_full, all, (size_t)capacity);
  memset(all, 0, sizeof all);
  first = last = NULL;
  if (write(q_full.wr, "", 1) != -1) return 4; /* full */

  make_pipe(&q_odd);
  put(&q_odd, "x", 1);
  put_block(&q_odd, 136);

  KEEP(malloc(24));
  wipe();
  ready("leak_count=1 leak_bytes=24 capacity=%d", capacity);
  char cmd[16];
  ssize_t n = read(0, cmd, sizeof cmd);
  if (n >= 4 && memcmp(cmd, "read", 4) == 0) {
    int intact = read_back(&q_pipe, 0) && read_back(&q_stream, 1) && read_back(&q_dgram, 1) &&
                 read_back(&q_full, 0) && read_back(&q_odd, 0);
    dprintf(1, "%s\n", intact ? "INTACT" : "CHANGED");
  }
  wait_for_test();
  return 0;
}
