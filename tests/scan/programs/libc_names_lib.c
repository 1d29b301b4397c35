/* An allocator that also defines glibc's __libc_malloc family, as tcmalloc
 * and mimalloc do (so that glibc's own calls reach them): a program linked
 * with it finds these names here before libc.so. Each block starts a page
 * of its own, as a tcmalloc span's first object does, so the word before
 * it is never a glibc chunk header. */
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

static char *pool, *next;
static size_t blocks;

static size_t rounded(size_t n) { return (n + 4095) & ~(size_t)4095; }

void *__libc_malloc(size_t n) {
  if (!pool) {
    pool = mmap(NULL, (size_t)1 << 30, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (pool == MAP_FAILED) return pool = NULL;
    next = pool;
  }
  char *p = next;
  next += rounded(n ? n : 1);
  blocks++;
  return p;
}
void __libc_free(void *p) { (void)p; }
void *__libc_calloc(size_t n, size_t m) { return __libc_malloc(n * m); } /* fresh pages */
void *__libc_realloc(void *p, size_t n) {
  void *q = __libc_malloc(n);
  if (q && p) memcpy(q, p, n); /* the pool is one mapping: reading past p is safe */
  return q;
}
void *__libc_memalign(size_t align, size_t n) { return align <= 4096 ? __libc_malloc(n) : NULL; }
void *__libc_valloc(size_t n) { return __libc_malloc(n); }
void *__libc_pvalloc(size_t n) { return __libc_malloc(rounded(n)); }

/* How many blocks this allocator handed out. */
size_t libc_names_blocks(void) { return blocks; }
