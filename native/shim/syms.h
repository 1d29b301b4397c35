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

/* The object whose definition of name the program's calls reach when it
 * is not the shim's: the first loaded before the shim that defines it (an
 * allocator preloaded ahead of the shim, a malloc in the executable), as
 * its path or "the executable", and its definition in *found; NULL when
 * the shim's comes first. */
const char *ur_sym_first_definer(const char *name, void **found);

/* The default-version definition of name in glibc's libc.so, or NULL. */
void *ur_sym_libc(const char *name);

/* Resolved by ur_syms_init (NULL if absent). */
struct ur_syms {
  size_t (*usable_size)(void *);          /* libc's malloc_usable_size */
  int aligned_alloc_strict;               /* glibc >= 2.38: aligned_alloc wants a power of two */
  char *single_threaded;                  /* libc's __libc_single_threaded (single_thread.h) */
};
extern struct ur_syms ur_syms;

/* glibc's own allocator: the __libc_* functions of libc.so itself, which
 * every block the shim registers comes from. Not the first definitions of
 * those names, which a reference would bind to: tcmalloc and mimalloc define
 * them too (for glibc's own calls), and a program linked with one, or
 * preloading it after the shim, had the shim register that allocator's
 * blocks, whose word before is no glibc chunk header (free's removal reads
 * it: size_map.h). Each starts as a function that resolves them all
 * (ur_syms_init) and calls on. */
struct ur_libc_alloc {
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*memalign)(size_t, size_t);
  void *(*valloc)(size_t);
  void *(*pvalloc)(size_t);
};
/* hidden: addressed from the instruction pointer, not through the GOT */
extern struct ur_libc_alloc ur_libc __attribute__((visibility("hidden")));

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
