/* A heap of 4 KiB blocks (argv[1] MiB of them), every page written, then
 * forks in a loop: each child lives ~2 ms, and just before it exits reads
 * its own Private_Dirty (smaps_rollup) and sends it back. A child's pages
 * are the parent's, shared copy-on-write: its Private_Dirty grows only by
 * what it writes itself, what the parent writes while it lives, and what a
 * pin in the parent (process_vm_readv of a page pagemap said it mapped
 * alone, before the fork) unshares. A line "r" on stdin prints the largest
 * Private_Dirty a child sent since the last "r" and how many children there
 * were. Blocks are kept, none leaked. */
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#include "../../scan/programs/scenario.h"

#define BLOCK 4096

/* Private_Dirty in kB from this process's smaps_rollup, 0 if unreadable;
 * no allocation: the child runs nothing the shim would record. */
static long private_dirty_kb(void) {
  char buf[2048] = {0};
  int fd = open("/proc/self/smaps_rollup", O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  char *p = strstr(buf, "Private_Dirty:");
  return p ? atol(p + 14) : 0;
}

static void child(int out) {
  struct timespec t = {0, 2000000};
  nanosleep(&t, NULL);
  long kb = private_dirty_kb();
  if (write(out, &kb, sizeof kb) < 0) _exit(1);
  _exit(0);
}

int main(int argc, char **argv) {
  long mib = argc > 1 ? atol(argv[1]) : 64;
  long nblocks = (mib << 20) / BLOCK;
  char **blocks = malloc((size_t)nblocks * sizeof(*blocks));
  for (long i = 0; i < nblocks; i++) {
    blocks[i] = malloc(BLOCK);
    memset(blocks[i], (int)(i & 0x7f) | 1, BLOCK);
  }
  wipe();
  int back[2];
  if (pipe(back) != 0) return 1;
  ready("blocks=%ld", nblocks);
  long most = 0, children = 0;
  for (;;) {
    struct pollfd in = {0, POLLIN, 0};
    if (poll(&in, 1, 0) > 0) {
      char line[8] = {0};
      ssize_t n = read(0, line, sizeof line);
      if (n <= 0) break;
      char out[96] = {0};
      int len = snprintf(out, sizeof out, "most=%ld children=%ld\n", most, children);
      if (write(1, out, (size_t)len) < 0) return 1;
      most = children = 0;
    }
    pid_t pid = fork();
    if (pid == 0) child(back[1]);
    if (pid < 0) return 1;
    long kb = 0;
    if (read(back[0], &kb, sizeof kb) == sizeof kb && kb > most) most = kb;
    waitpid(pid, NULL, 0);
    children++;
    struct timespec gap = {0, 1000000};
    nanosleep(&gap, NULL);
  }
  KEEP(blocks);
  return 0;
}
