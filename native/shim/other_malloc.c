/*
 * Another object's malloc comes before the shim's (preloaded ahead of it,
 * or defined in the executable), so the program's calls reach it first.
 * Two kinds, told apart by what they do, not by their names:
 * - a wrapper that counts or logs and forwards each call to the next
 *   malloc (dlsym(RTLD_NEXT)): glibc's libmemusage.so, libtrash, a
 *   program's own interposer. The next malloc is the shim's: every call
 *   arrives, and the shim works as if it came first (a wrapper's header
 *   before each block makes the program's pointers interior ones);
 * - an allocator that serves the calls itself (tcmalloc, jemalloc,
 *   mimalloc preloaded ahead): the shim hears nothing, and its empty
 *   registry would report no leak. The shim is then inert, says so in one
 *   line on stderr, and a scan exits 2 naming the cause.
 *
 * The constructor asks: one malloc and one free through the other
 * object's own functions, with the thread marked as doing the shim's work
 * (ur_tls.busy), so that a call reaching the shim comes down its slow path
 * (entry.c nested_begin) and is counted there, in this thread's counter
 * only. Both must arrive: a wrapper that forwarded malloc but not free
 * would leave every freed block registered, a false leak each.
 *
 * Why the constructor's moment: every allocator already serves calls
 * from other objects' constructors and from libc's start-up, before its own
 * constructor has run (a wrapper finds its next malloc lazily, memusage
 * included), so one more there breaks none; and no allocator call is in
 * progress on this thread, so a wrapper's lock is not taken twice, which a
 * probe from ur_init (reached from inside the wrapper's first forwarded
 * call) could do. Until then the shim runs as usual: a wrapper's calls
 * before the constructor are registered; an allocator's never arrive.
 */
#include "other_malloc.h"

#include <stdlib.h>

#include "syms.h"

__thread uint32_t ur_probe_calls __attribute__((tls_model("initial-exec")));

static void *(*other_malloc)(size_t);
static void (*other_free)(void *);

const char *ur_other_malloc_find(void) {
  void *m, *f;
  const char *definer = ur_sym_first_definer("malloc", &m);
  if (!definer) return NULL;
  other_malloc = (void *(*)(size_t))m;
  /* The free the program's calls reach: the same object's, or one before. */
  (void)ur_sym_first_definer("free", &f);
  other_free = (void (*)(void *))f;
  return definer;
}

/* Whether one call of fn reaches the shim. */
static int arrives(void (*call)(void)) {
  ur_probe_calls = 1;
  ur_tls.busy++;
  call();
  ur_tls.busy--;
  int arrived = ur_probe_calls > 1;
  ur_probe_calls = 0;
  return arrived;
}

static void *volatile probe_block;
static void probe_malloc(void) { probe_block = other_malloc(24); }
static void probe_free(void) { other_free(probe_block); }

int ur_other_malloc_forwards(void) {
  if (!other_malloc) return 1;
  int mallocs = arrives(probe_malloc);
  void *p = probe_block;
  probe_block = NULL;
  if (!p) return mallocs; /* nothing to free: malloc's answer alone */
  if (!other_free) {
    /* The program's free is the shim's: right for a block that came from
     * it, and a foreign one is better kept than handed to glibc. */
    if (mallocs) free(p);
    return mallocs;
  }
  probe_block = p;
  int frees = arrives(probe_free);
  probe_block = NULL;
  return mallocs && frees;
}
