/*
 * Functions the shim needs from glibc or from the next library after it,
 * found without dlopen/dlsym: those allocate through the interposed malloc
 * and rewrite the calling thread's dlerror() state, so a lookup made while
 * the program is between a failed dlsym and its dlerror() freed the error
 * glibc was about to report. Here the loaded objects' dynamic symbol tables
 * are read in place (dl_iterate_phdr, DT_GNU_HASH or DT_HASH): nothing is
 * allocated and no loader state changes.
 */
#ifndef UR_SYMS_H
#define UR_SYMS_H

#include <stddef.h>

/* Resolve everything below (idempotent; ur_init calls it first). */
void ur_syms_init(void);

/* The default-version definition of name in the first object loaded after
 * the shim that defines it (dlsym(RTLD_NEXT) for the objects loaded at
 * start-up), or NULL. */
void *ur_sym_next(const char *name);

/* The default-version definition of name in glibc's libc.so, or NULL. */
void *ur_sym_libc(const char *name);

/* Resolved by ur_syms_init (NULL if absent). */
struct ur_syms {
  size_t (*usable_size)(void *);          /* libc's malloc_usable_size */
  int aligned_alloc_strict;               /* glibc >= 2.38: aligned_alloc wants a power of two */
  char *single_threaded;                  /* libc's __libc_single_threaded (single_thread.h) */
};
extern struct ur_syms ur_syms;

/* glibc's malloc_usable_size (0 while it is still being resolved).
 * glibc 2.36 exports malloc_usable_size only as a weak symbol with no
 * __libc_ twin, so it is looked up in libc itself (ur_syms_init), never
 * through dlsym: the next definition after ours is not always glibc's (a
 * program linked with jemalloc finds jemalloc's first, which crashes on
 * glibc's blocks), and dlsym allocates and rewrites the thread's dlerror
 * state. */
static inline size_t ur_real_usable_size(void *p) {
  size_t (*f)(void *) = __atomic_load_n(&ur_syms.usable_size, __ATOMIC_ACQUIRE);
  if (__builtin_expect(!f, 0)) {
    ur_syms_init();
    f = __atomic_load_n(&ur_syms.usable_size, __ATOMIC_ACQUIRE);
    if (!f) return 0;
  }
  return f(p);
}

#endif
