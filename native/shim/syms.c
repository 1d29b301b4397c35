#include "syms.h"

#include <elf.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "state.h"

struct ur_syms ur_syms;

enum { WANT_NEXT, WANT_LIBC };

struct search {
  const char *name;
  int want;
  int data; /* an object, not a function */
  int past_self; /* WANT_NEXT: the shim's own object has been seen */
  void *found;
};

static int contains(const struct dl_phdr_info *info, uintptr_t addr) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (addr >= lo && addr < lo + ph->p_memsz) return 1;
  }
  return 0;
}

static uint32_t gnu_hash(const char *s) {
  uint32_t h = 5381;
  for (; *s; s++) h = h * 33 + (uint8_t)*s;
  return h;
}

static uint32_t sysv_hash(const char *s) {
  uint32_t h = 0;
  for (; *s; s++) {
    h = (h << 4) + (uint8_t)*s;
    uint32_t g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

struct dynamic {
  uintptr_t base;
  const ElfW(Sym) *symtab;
  const char *strtab;
  const uint32_t *gnu_hash, *sysv_hash;
  const ElfW(Half) *versym;
  int data;
};

/* The loader relocates most objects' dynamic entries in place; the vDSO's
 * (read-only) keep their link-time values. */
static const void *dyn_ptr(uintptr_t base, ElfW(Addr) v) {
  return (const void *)(v < base ? v + base : v);
}

static void *match(const struct dynamic *d, uint32_t i, const char *name) {
  const ElfW(Sym) *s = &d->symtab[i];
  int type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
  if (s->st_shndx == SHN_UNDEF || s->st_value == 0) return NULL;
  if (d->data ? type != STT_OBJECT : type != STT_FUNC && type != STT_GNU_IFUNC) return NULL;
  if (bind != STB_GLOBAL && bind != STB_WEAK) return NULL;
  /* dlsym without a version takes the default one, never a hidden one. */
  if (d->versym && (d->versym[i] & 0x8000)) return NULL;
  if (strcmp(d->strtab + s->st_name, name) != 0) return NULL;
  void *addr = (void *)(d->base + s->st_value);
  if (type == STT_GNU_IFUNC) addr = ((void *(*)(void))addr)();
  return addr;
}

static void *lookup(const struct dl_phdr_info *info, const char *name, int data) {
  struct dynamic d = {.base = info->dlpi_addr, .data = data};
  const ElfW(Dyn) *dyn = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn) return NULL;
  for (; dyn->d_tag != DT_NULL; dyn++) {
    switch (dyn->d_tag) {
      case DT_SYMTAB: d.symtab = dyn_ptr(d.base, dyn->d_un.d_ptr); break;
      case DT_STRTAB: d.strtab = dyn_ptr(d.base, dyn->d_un.d_ptr); break;
      case DT_GNU_HASH: d.gnu_hash = dyn_ptr(d.base, dyn->d_un.d_ptr); break;
      case DT_HASH: d.sysv_hash = dyn_ptr(d.base, dyn->d_un.d_ptr); break;
      case DT_VERSYM: d.versym = dyn_ptr(d.base, dyn->d_un.d_ptr); break;
      default: break;
    }
  }
  if (!d.symtab || !d.strtab) return NULL;
  if (d.gnu_hash) {
    const uint32_t *h = d.gnu_hash;
    uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
    if (!nbuckets) return NULL;
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)&h[4] + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t hash = gnu_hash(name);
    uint32_t i = buckets[hash % nbuckets];
    if (i < symoffset) return NULL;
    for (;; i++) {
      uint32_t ch = chain[i - symoffset];
      if ((ch | 1) == (hash | 1)) {
        void *f = match(&d, i, name);
        if (f) return f;
      }
      if (ch & 1) return NULL;
    }
  }
  if (d.sysv_hash) {
    uint32_t nbucket = d.sysv_hash[0];
    const uint32_t *bucket = &d.sysv_hash[2], *chain = bucket + nbucket;
    if (!nbucket) return NULL;
    for (uint32_t i = bucket[sysv_hash(name) % nbucket]; i != STN_UNDEF; i = chain[i]) {
      void *f = match(&d, i, name);
      if (f) return f;
    }
  }
  return NULL;
}

static int visit(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct search *s = arg;
  if (s->want == WANT_NEXT) {
    if (!s->past_self) {
      s->past_self = contains(info, (uintptr_t)&ur_sym_next);
      return 0;
    }
  } else if (!contains(info, (uintptr_t)&gnu_get_libc_version)) {
    return 0; /* not __libc_malloc: other allocators define it too */
  }
  s->found = lookup(info, s->name, s->data);
  return s->found != NULL || s->want == WANT_LIBC;
}

static void *search(const char *name, int want, int data) {
  struct search s = {name, want, data, 0, NULL};
  dl_iterate_phdr(visit, &s);
  return s.found;
}

struct first {
  const char *name;
  const char *definer; /* NULL: the shim's own, or none */
  void *found;
};

static int visit_first(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct first *f = arg;
  if (contains(info, (uintptr_t)&ur_sym_first_definer)) return 1; /* ours comes first */
  if (!(f->found = lookup(info, f->name, 0))) return 0;
  f->definer = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "the executable";
  return 1;
}

const char *ur_sym_first_definer(const char *name, void **found) {
  struct first f = {name, NULL, NULL};
  dl_iterate_phdr(visit_first, &f);
  *found = f.definer ? f.found : NULL;
  return f.definer;
}

void *ur_sym_next(const char *name) { return search(name, WANT_NEXT, 0); }
void *ur_sym_libc(const char *name) { return search(name, WANT_LIBC, 0); }

static void *first_malloc(size_t n) {
  ur_syms_init();
  return ur_libc.malloc(n);
}
static void first_free(void *p) {
  ur_syms_init();
  ur_libc.free(p);
}
static void *first_calloc(size_t n, size_t m) {
  ur_syms_init();
  return ur_libc.calloc(n, m);
}
static void *first_realloc(void *p, size_t n) {
  ur_syms_init();
  return ur_libc.realloc(p, n);
}
static void *first_memalign(size_t align, size_t n) {
  ur_syms_init();
  return ur_libc.memalign(align, n);
}
static void *first_valloc(size_t n) {
  ur_syms_init();
  return ur_libc.valloc(n);
}
static void *first_pvalloc(size_t n) {
  ur_syms_init();
  return ur_libc.pvalloc(n);
}

struct ur_libc_alloc ur_libc = {first_malloc,   first_free,   first_calloc, first_realloc,
                                first_memalign, first_valloc, first_pvalloc};

/* libc's definition of name, else the one the link bound (a libc without
 * the name in its dynamic symbols, which glibc 2.31-2.43 all have). */
#define LIBC_OR(name, bound) (__typeof__(&bound))or_bound(ur_sym_libc(name), (void *)&bound)
static void *or_bound(void *found, void *bound) { return found ? found : bound; }

static void resolve_allocator(void) {
  struct ur_libc_alloc a = {
      LIBC_OR("__libc_malloc", __libc_malloc),     LIBC_OR("__libc_free", __libc_free),
      LIBC_OR("__libc_calloc", __libc_calloc),     LIBC_OR("__libc_realloc", __libc_realloc),
      LIBC_OR("__libc_memalign", __libc_memalign), LIBC_OR("__libc_valloc", __libc_valloc),
      LIBC_OR("__libc_pvalloc", __libc_pvalloc)};
  __atomic_store_n(&ur_libc.free, a.free, __ATOMIC_RELAXED);
  __atomic_store_n(&ur_libc.calloc, a.calloc, __ATOMIC_RELAXED);
  __atomic_store_n(&ur_libc.realloc, a.realloc, __ATOMIC_RELAXED);
  __atomic_store_n(&ur_libc.memalign, a.memalign, __ATOMIC_RELAXED);
  __atomic_store_n(&ur_libc.valloc, a.valloc, __ATOMIC_RELAXED);
  __atomic_store_n(&ur_libc.pvalloc, a.pvalloc, __ATOMIC_RELAXED);
  __atomic_store_n(&ur_libc.malloc, a.malloc, __ATOMIC_RELEASE);
}

void ur_syms_init(void) {
  if (__atomic_load_n(&ur_syms.usable_size, __ATOMIC_ACQUIRE)) return;
  /* "2.36": gnu_get_libc_version returns a static string. */
  const char *v = gnu_get_libc_version();
  unsigned major = 0, minor = 0;
  for (; *v >= '0' && *v <= '9'; v++) major = major * 10 + (unsigned)(*v - '0');
  if (*v == '.')
    for (v++; *v >= '0' && *v <= '9'; v++) minor = minor * 10 + (unsigned)(*v - '0');
  ur_syms.aligned_alloc_strict = major > 2 || (major == 2 && minor >= 38);
  /* libc's own storage, which its code reads, even when the program has a
   * copy of the variable (a copy relocation) that our GOT would name. */
  ur_syms.single_threaded = search("__libc_single_threaded", WANT_LIBC, 1);
  resolve_allocator();
  __atomic_store_n(&ur_syms.usable_size, (size_t(*)(void *))ur_sym_libc("malloc_usable_size"),
                   __ATOMIC_RELEASE);
}
