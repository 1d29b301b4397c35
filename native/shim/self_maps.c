#include "self_maps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kept_file.h"

/* The maps, opened as the helper starts and in a forked child, and kept
 * (kept_file.h). Opened by /proc/self, the process's: its maps read on
 * after its main thread's exit. In the child at once, not as its helper
 * starts: lldpd's privilege-separated child chroots before its first
 * allocation, so its helper starts where /proc is not. */
static struct ur_kept_file g_kept = UR_KEPT_FILE_NONE;

void ur_self_maps_keep(void) { ur_kept_file_open(&g_kept, "/proc/self/maps"); }

void ur_self_maps_after_fork_child(void) {
  ur_kept_file_drop(&g_kept); /* the parent's */
  ur_self_maps_keep();
}

int ur_self_maps_foreach(ur_maps_fn fn, void *arg) {
  /* pread: a seq_file read at offset 0 starts its walk again. */
  int kept = ur_kept_file_fd(&g_kept), fd = kept;
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
