#include "self_maps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The maps, opened as the shim starts and kept: a process that chroots
 * (privilege-separated daemons) or enters a mount namespace without /proc
 * can open them no more. A file of the process's own maps, unlike a
 * descriptor of /proc itself, is no way out of a chroot. Identified by
 * device and inode: a program that closes every descriptor, and may get the
 * number back for something else, has closed ours. Opened by /proc/self,
 * the process's: its maps read on after its main thread's exit. */
#define KEPT_FD_MIN 100
static int g_kept = -1;
static dev_t g_kept_dev;
static ino_t g_kept_ino;

static int kept_fd(void) {
  struct stat st;
  if (g_kept >= 0 &&
      (fstat(g_kept, &st) != 0 || st.st_dev != g_kept_dev || st.st_ino != g_kept_ino))
    g_kept = -1; /* not ours any more: never closed by us */
  return g_kept;
}

void ur_self_maps_keep(void) {
  if (kept_fd() >= 0) return;
  int saved = errno;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  /* Out of the numbers a program expects its own first open()s to get
   * (stdin, if it started with 0 closed, or 3). */
  if (fd >= 0 && fd < KEPT_FD_MIN) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, KEPT_FD_MIN);
    close(fd);
    fd = high;
  }
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    g_kept_dev = st.st_dev;
    g_kept_ino = st.st_ino;
    g_kept = fd;
  } else if (fd >= 0) {
    close(fd);
  }
  errno = saved;
}

void ur_self_maps_after_fork_child(void) {
  /* The parent's maps: the child's helper opens its own, if it still can. */
  if (kept_fd() >= 0) close(g_kept);
  g_kept = -1;
}

int ur_self_maps_foreach(ur_maps_fn fn, void *arg) {
  /* pread: a seq_file read at offset 0 starts its walk again. */
  int kept = kept_fd(), fd = kept;
  /* thread-self, not self: a process whose main thread exited has none. */
  if (fd < 0 && (fd = open("/proc/thread-self/maps", O_RDONLY | O_CLOEXEC)) < 0) return -errno;
  static char buf[1 << 16];
  size_t have = 0;
  off_t pos = 0;
  int stop = 0;
  while (!stop) {
    ssize_t got = pread(fd, buf + have, sizeof(buf) - 1 - have, pos);
    if (got <= 0) break;
    pos += got;
    have += (size_t)got;
    buf[have] = '\0';
    char *line = buf, *nl;
    while (!stop && (nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      char *end;
      uint64_t lo = strtoull(line, &end, 16), hi = *end == '-' ? strtoull(end + 1, &end, 16) : 0;
      if (hi > lo) stop = fn(lo, hi, end, arg);
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
  }
  if (fd != kept) close(fd);
  return 0;
}

int ur_maps_perms(const char *rest, char perms[5]) {
  while (*rest == ' ') rest++;
  for (int i = 0; i < 4; i++) {
    if (!rest[i]) return 0;
    perms[i] = rest[i];
  }
  perms[4] = '\0';
  return 1;
}

uint64_t ur_maps_inode(const char *rest) {
  /* " perms offset dev inode [path]": the fourth field. */
  for (int field = 0; field < 3; field++) {
    while (*rest == ' ') rest++;
    while (*rest && *rest != ' ') rest++;
  }
  uint64_t inode = 0;
  while (*rest == ' ') rest++;
  for (; *rest >= '0' && *rest <= '9'; rest++) inode = inode * 10 + (uint64_t)(*rest - '0');
  return inode;
}
