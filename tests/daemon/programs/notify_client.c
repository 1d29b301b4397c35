/* Stands in for the shim's check_unreachable_on_signal (written later):
 * holds one leak like globals.c, and for each line "SCAN" on stdin asks
 * unreachabled, on the notify socket argv[1], to scan this very process,
 * then prints the daemon's reply as "REPLY <reply>". Exits when stdin closes.
 * With argv[2] given, it asks about that pid instead (must be refused). */
#include <sys/socket.h>
#include <sys/un.h>

#include "../../scan/programs/scenario.h"

#include "../../scan/programs/globals_heap.h"

static void ask(const char *path, int pid) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    dprintf(1, "REPLY ERR cannot connect\n");
    if (fd >= 0) close(fd);
    return;
  }
  char req[64];
  int n = snprintf(req, sizeof req, "SCAN %d\n", pid);
  if (write(fd, req, (size_t)n) != n) {
    dprintf(1, "REPLY ERR write\n");
    close(fd);
    return;
  }
  char reply[128];
  ssize_t got = 0, r;
  while (got < (ssize_t)sizeof reply - 1 && (r = read(fd, reply + got, sizeof reply - 1 - got)) > 0)
    got += r;
  close(fd);
  reply[got > 0 ? got : 0] = '\0';
  char *nl = strchr(reply, '\n');
  if (nl) *nl = '\0';
  dprintf(1, "REPLY %s\n", reply);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int pid = argc > 2 ? atoi(argv[2]) : (int)getpid();
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=300");
  char line[16];
  size_t len = 0;
  char c;
  while (read(0, &c, 1) > 0) {
    if (c != '\n') {
      if (len < sizeof line - 1) line[len++] = c;
      continue;
    }
    line[len] = '\0';
    len = 0;
    if (strcmp(line, "SCAN") == 0) ask(argv[1], pid);
    if (strcmp(line, "WAIT") == 0) wait_for_test();
  }
  return 0;
}
