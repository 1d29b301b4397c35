/* glibc's support/xunistd.h subset. Written for this project. */
#ifndef SUPPORT_XUNISTD_H
#define SUPPORT_XUNISTD_H

#include <sys/types.h>
#include <unistd.h>

pid_t xfork(void);
pid_t xwaitpid(pid_t pid, int *status, int flags);
int xopen(const char *path, int flags, mode_t mode);
void xclose(int fd);
void *xmmap(void *addr, size_t length, int prot, int flags, int fd);
long xsysconf(int name);

#endif
