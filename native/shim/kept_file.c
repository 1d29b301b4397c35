#include "kept_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Out of the numbers a program expects its own first open()s to get
 * (stdin, if it started with 0 closed, or 3). */
#define KEPT_FD_MIN 100

int ur_kept_file_fd(struct ur_kept_file *k) {
  struct stat st;
  if (k->fd >= 0 && (fstat(k->fd, &st) != 0 || st.st_dev != k->dev || st.st_ino != k->ino))
    k->fd = -1; /* not ours any more: never closed by us */
  return k->fd;
}

void ur_kept_file_open(struct ur_kept_file *k, const char *path) {
  if (ur_kept_file_fd(k) >= 0) return;
  int saved = errno;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && fd < KEPT_FD_MIN) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, KEPT_FD_MIN);
    close(fd);
    fd = high;
  }
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    k->dev = st.st_dev;
    k->ino = st.st_ino;
    k->fd = fd;
  } else if (fd >= 0) {
    close(fd);
  }
  errno = saved;
}

void ur_kept_file_drop(struct ur_kept_file *k) {
  if (ur_kept_file_fd(k) >= 0) close(k->fd);
  k->fd = -1;
}
