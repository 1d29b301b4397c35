/*
 * unshare() and setns() calls the kernel grants only to a process of one
 * thread: a new or another user namespace (`unshare -U`, bwrap, crun,
 * `nsenter -U`), another mount namespace (`nsenter -m`: the threads share
 * their filesystem context) and another time namespace. The shim's helper is
 * a second thread, so under the shim these failed (EINVAL; EUSERS for time)
 * where the program alone succeeds. The shim stands in front of both calls:
 * the helper steps aside for the call and a new one starts as it returns. A
 * helper busy with a scan stays, and the call fails as it would in a
 * threaded program.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "helper.h"
#include "state.h"
#include "syms.h"

/* unshare: CLONE_NEWUSER implies CLONE_THREAD; these three need one thread. */
#define UNSHARE_ALONE (CLONE_NEWUSER | CLONE_THREAD | CLONE_SIGHAND | CLONE_VM)
/* setns: nstype 0 accepts any namespace, so any may need it. */
#define SETNS_ALONE (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWTIME)

static pthread_mutex_t aside_lock = PTHREAD_MUTEX_INITIALIZER;

/* Not dlsym (syms.h): it allocates and clears a pending dlerror(). */
static void *next_definition(const char *name) { return ur_sym_next(name); }

/* The shim is on, and this is the process it last set up: not the child of
 * a vfork() or of a raw clone() left to the kernel (raw_clone.c), which
 * runs no fork handler and has none of the parent's threads (the helper
 * included) in its own group. */
static int helper_is_ours(void) {
  return !(ur_load32(&ur_g.slow) & (UR_SLOW_INERT | UR_SLOW_UNINIT)) &&
         (uint64_t)getpid() == unreachable_descriptor.pid;
}

/* Runs call(a, b) with no helper thread alive, if the helper can go. */
static int alone(int (*call)(int, int), int a, int b) {
  pthread_mutex_lock(&aside_lock);
  ur_tls.busy++; /* no allocation here may start a helper before the call (nested_begin) */
  int stepped = ur_helper_step_aside();
  int r = call(a, b);
  if (stepped) {
    int saved = errno;
    ur_helper_start(); /* its DTV: registered, the shim's own (helper.c) */
    errno = saved;
  }
  ur_tls.busy--;
  pthread_mutex_unlock(&aside_lock);
  return r;
}

typedef int (*unshare_fn)(int);
typedef int (*setns_fn)(int, int);
static unshare_fn real_unshare;
static setns_fn real_setns;

static int call_unshare(int flags, int unused) {
  (void)unused;
  return real_unshare(flags);
}

UR_EXPORT int unshare(int flags) {
  if (!real_unshare) real_unshare = (unshare_fn)next_definition("unshare");
  if (!(flags & UNSHARE_ALONE) || !helper_is_ours()) return real_unshare(flags);
  return alone(call_unshare, flags, 0);
}

UR_EXPORT int setns(int fd, int nstype) {
  if (!real_setns) real_setns = (setns_fn)next_definition("setns");
  if ((nstype && !(nstype & SETNS_ALONE)) || !helper_is_ours()) return real_setns(fd, nstype);
  return alone(real_setns, fd, nstype);
}
