#include "single_thread.h"

#include <errno.h>
#include <grp.h>
#include <linux/membarrier.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "lock.h"
#include "state.h"
#include "syms.h"
#include "threads.h"

/* 0: glibc knows the truth; 1: the flag is set back (one program thread
 * and the helper); 2: cleared for a set*id() call in progress. */
enum { REAL, FAKED, LENT };
static int g_state;

/* glibc reads its own storage (malloc, set*id); a program reading the
 * exported name may hold a copy of it (copy relocation), which is what our
 * GOT names then. glibc's pthread_create writes both; so do we. */
static int flag(void) {
  char *internal = ur_syms.single_threaded;
  return internal ? __atomic_load_n(internal, __ATOMIC_SEQ_CST) != 0 : 0;
}

static void flag_set(char v) {
  __atomic_store_n(ur_syms.single_threaded, v, __ATOMIC_SEQ_CST);
  __atomic_store_n(&__libc_single_threaded, v, __ATOMIC_SEQ_CST);
}

int ur_single_before_helper(void) { return flag(); }

int ur_single_glibc_sees_one(void) { return flag(); }

void ur_single_after_helper(int was_single) {
  /* Without membarrier, ur_single_end could not make the program thread
   * see the flag cleared before the helper goes on. */
  if (!was_single || !ur_load32(&ur_g.bias_ok)) {
    __atomic_store_n(&g_state, REAL, __ATOMIC_RELEASE);
    return;
  }
  flag_set(1);
  __atomic_store_n(&g_state, FAKED, __ATOMIC_RELEASE);
}

void ur_single_end(void) {
  unsigned looks = 0;
  for (;;) {
    int s = FAKED;
    if (__atomic_compare_exchange_n(&g_state, &s, REAL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      break;
    if (s == REAL) return;
    ur_wait_a_turn(&looks); /* a set*id() call has it: wait for the flag to come back */
  }
  flag_set(0);
  /* The program thread announces an allocator call before glibc reads the
   * flag; this barrier makes it see the flag cleared or show its call. */
  int saved = errno;
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  errno = saved;
  ur_threads_wait_quiescent();
}

/* glibc changes every thread's credentials only when it knows of more than
 * one thread: left alone, the helper would keep the ids the program gave up. */
static int lend_begin(void) {
  int s = FAKED;
  if (!__atomic_compare_exchange_n(&g_state, &s, LENT, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return 0;
  if (!flag()) {
    /* The program started a thread since: glibc knows, and keeps knowing. */
    __atomic_store_n(&g_state, REAL, __ATOMIC_RELEASE);
    return 0;
  }
  flag_set(0);
  return 1;
}

static void lend_end(int lent) {
  if (!lent) return;
  flag_set(1);
  __atomic_store_n(&g_state, FAKED, __ATOMIC_RELEASE);
}

#define SETXID(name, params, args)                                        \
  UR_EXPORT int name params {                                             \
    static int(*real) params;                                             \
    int(*f) params = __atomic_load_n(&real, __ATOMIC_ACQUIRE);            \
    if (!f) {                                                             \
      f = (int(*) params)ur_sym_next(#name);                              \
      __atomic_store_n(&real, f, __ATOMIC_RELEASE);                       \
    }                                                                     \
    if (!f) {                                                             \
      errno = ENOSYS;                                                     \
      return -1;                                                          \
    }                                                                     \
    int lent = lend_begin();                                              \
    int r = f args;                                                       \
    lend_end(lent);                                                       \
    return r;                                                             \
  }

SETXID(setuid, (uid_t a), (a))
SETXID(setgid, (gid_t a), (a))
SETXID(seteuid, (uid_t a), (a))
SETXID(setegid, (gid_t a), (a))
SETXID(setreuid, (uid_t a, uid_t b), (a, b))
SETXID(setregid, (gid_t a, gid_t b), (a, b))
SETXID(setresuid, (uid_t a, uid_t b, uid_t c), (a, b, c))
SETXID(setresgid, (gid_t a, gid_t b, gid_t c), (a, b, c))
SETXID(setgroups, (size_t n, const gid_t *g), (n, g))
