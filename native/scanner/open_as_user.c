/* Pinning a file with another user's rights, from a root process: the files
 * a heap dump's MAPS names are its writer's words, so root opens them only as
 * that writer could (symbolize/as_user.py). Linux credentials belong to each
 * thread; glibc's set*id wrappers change every thread's, the raw system calls
 * only the caller's. So the calling thread alone (holding the GIL: no Python
 * runs on it meanwhile) takes the user's groups, effective gid and uid, opens
 * the path, and takes its own back. The real and saved ids stay root's, which
 * is what lets it return; the other threads never change. */
#include "native.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_GROUPS 65536

/* Become (uid, gid, groups) in this thread's effective ids; 0 or -errno. */
static int become(uid_t uid, gid_t gid, const gid_t *groups, size_t n) {
  if (syscall(SYS_setgroups, n, groups) < 0) return -errno;
  if (syscall(SYS_setresgid, (gid_t)-1, gid, (gid_t)-1) < 0) return -errno;
  if (syscall(SYS_setresuid, (uid_t)-1, uid, (uid_t)-1) < 0) return -errno;
  return 0;
}

/* Back to root with the groups it had; a thread that cannot is not left
 * running as the user: the process ends. */
static void come_back(gid_t gid, const gid_t *groups, size_t n) {
  if (syscall(SYS_setresuid, (uid_t)-1, (uid_t)0, (uid_t)-1) < 0 ||
      syscall(SYS_setresgid, (gid_t)-1, gid, (gid_t)-1) < 0 ||
      syscall(SYS_setgroups, n, groups) < 0) {
    fprintf(stderr, "unreachable: cannot take back root's credentials: %d\n", errno);
    abort();
  }
}

/* The path pinned (O_PATH) as the current effective ids resolve it, and a
 * regular file only if they may also open it for reading (the kernel's own
 * check, ACLs included, of that very inode); an fd or -errno. */
static int pin_readable(const char *path) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return -errno;
  struct stat st;
  if (fstat(fd, &st) < 0) goto fail;
  if (S_ISREG(st.st_mode)) {
    char link[64];
    snprintf(link, sizeof link, "/proc/thread-self/fd/%d", fd);
    int rd = open(link, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (rd < 0) goto fail;
    close(rd);
  }
  return fd;
fail:;
  int err = errno;
  close(fd);
  return -err;
}

PyObject *ur_py_open_as_user(PyObject *self, PyObject *args) {
  (void)self;
  unsigned int uid, gid;
  PyObject *group_list, *path_obj;
  if (!PyArg_ParseTuple(args, "IIOO&", &uid, &gid, &group_list, PyUnicode_FSConverter, &path_obj))
    return NULL;
  PyObject *seq = PySequence_Fast(group_list, "groups must be a sequence");
  gid_t *want = NULL, *mine = NULL;
  PyObject *result = NULL;
  if (!seq) goto out;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  int had = getgroups(0, NULL);
  if (n > MAX_GROUPS || had < 0) {
    PyErr_SetString(PyExc_ValueError, "open_as_user: too many groups");
    goto out;
  }
  want = calloc((size_t)n + 1, sizeof *want);
  mine = calloc((size_t)had + 1, sizeof *mine);
  if (!want || !mine) {
    PyErr_NoMemory();
    goto out;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long g = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(seq, i));
    if (PyErr_Occurred()) goto out;
    want[i] = (gid_t)g;
  }
  had = getgroups(had, mine);
  if (had < 0 || geteuid() != 0) {
    PyErr_SetString(PyExc_PermissionError, "open_as_user: only root takes another user's rights");
    goto out;
  }
  gid_t egid = getegid();
  /* A change of effective ids makes the process undumpable (no core, its
   * /proc files root's); it is put back as it was. */
  int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  int fd = become(uid, gid, want, (size_t)n);
  if (fd == 0) fd = pin_readable(PyBytes_AS_STRING(path_obj));
  come_back(egid, mine, (size_t)had);
  if (dumpable >= 0) prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
  if (fd < 0) {
    errno = -fd;
    PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
  } else {
    result = PyLong_FromLong(fd);
  }
out:
  Py_XDECREF(seq);
  Py_DECREF(path_obj);
  free(want);
  free(mine);
  return result;
}
