/*
 * A file of the process's own /proc entry, opened while the process can
 * and kept: a process that chroots (privilege-separated daemons) or enters
 * a mount namespace without /proc can open it no more. A file of the
 * process's own, unlike a descriptor of a /proc directory, is no way out of
 * a chroot. Identified by device and inode: a program that closes every
 * descriptor, and may get the number back for something else, has closed
 * ours, which is then never used or closed by us.
 */
#ifndef UR_KEPT_FILE_H
#define UR_KEPT_FILE_H

#include <sys/types.h>

struct ur_kept_file {
  int fd; /* -1: none */
  dev_t dev;
  ino_t ino;
};
#define UR_KEPT_FILE_NONE {-1, 0, 0}

/* Opens path to keep, unless it is kept already. errno is left as it was. */
void ur_kept_file_open(struct ur_kept_file *k, const char *path);
/* The descriptor, or -1 if there is none or the program closed it. */
int ur_kept_file_fd(struct ur_kept_file *k);
/* Closes it (a forked child's copy of the parent's). */
void ur_kept_file_drop(struct ur_kept_file *k);

#endif
