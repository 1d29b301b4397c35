/* A daemon's start: it closes every descriptor above stderr (closefrom,
 * close_range or a loop of close), opens its own, and allocates from call
 * sites never seen before. With backtraces on, the unwinder must not have
 * lost its own descriptors to the program, nor take the program's: read
 * from them (its data lost), write to them (bytes it never sent) or close
 * them. Its pipe takes the numbers the unwinder's had.
 * argv[1]: closefrom | close_range | loop. Prints "ok" when every byte the
 * program sent itself arrived and its descriptors are still its own. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#define DEPTH 24

/* Distinct call sites at each depth: unwinding each is new to the cache. */
__attribute__((noinline)) static void *site(int depth, int salt) {
  if (depth == 0) return malloc(16 + (size_t)salt);
  void *p = site(depth - 1, salt);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

static int close_all(const char *how) {
  if (strcmp(how, "closefrom") == 0) {
    closefrom(3);
  } else if (strcmp(how, "close_range") == 0) {
    if (close_range(3, ~0U, 0) != 0) return -1;
  } else {
    for (int fd = 3; fd < 4096; fd++) close(fd);
  }
  return 0;
}

/* Call sites and stack pages the unwinder has not seen before. */
__attribute__((noinline)) static void *fresh_site(int depth, int salt) {
  if (depth == 0) return malloc(32 + (size_t)salt);
  void *p = depth % 2 ? fresh_site(depth - 1, salt + 1) : fresh_site(depth - 1, salt);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

static int fds[2];
static const char *failure;

static void *talk(void *arg) {
  (void)arg;
  for (int round = 0; round < 50 && !failure; round++) {
    char out = (char)('a' + round % 26), in = 0;
    if (write(fds[1], &out, 1) != 1) failure = "write";
    for (int i = 0; i < 8; i++) free(fresh_site((round + i) % DEPTH, round * 8 + i));
    if (read(fds[0], &in, 1) != 1) failure = "the program's byte was taken";
    else if (in != out) failure = "a byte the program never sent";
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  for (int i = 0; i < 64; i++) free(site(i % DEPTH, i)); /* the unwinder is up */
  if (close_all(argv[1]) != 0) return 3;
  if (pipe2(fds, O_NONBLOCK) != 0) return 4;
  for (int t = 0; t < 4 && !failure; t++) {
    pthread_t th;
    if (pthread_create(&th, NULL, talk, NULL) || pthread_join(th, NULL)) return 5;
  }
  if (failure) {
    printf("%s (fds %d %d)\n", failure, fds[0], fds[1]);
    return 1;
  }
  if (fcntl(fds[0], F_GETFD) < 0 || fcntl(fds[1], F_GETFD) < 0) {
    printf("the program's pipe was closed\n");
    return 1;
  }
  puts("ok");
  return 0;
}
