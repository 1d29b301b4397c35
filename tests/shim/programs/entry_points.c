/* Every interposed entry point: results, alignment, errno, and what the
 * registry and the thread's slot say afterwards. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>

#include <gnu/libc-version.h>

#include "shimtest.h"

static volatile size_t huge = SIZE_MAX - 4096, half = SIZE_MAX / 2;

static int aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* Out of every entry point the slot names nothing: no op and no block, not
 * even the last one's (a slot's pairs count only while its op is set, and
 * malloc's and free's inline paths write the op alone). */
static int idle(const struct ur_thread_slot *s) {
  return s->op == UR_OP_NONE && s->in_ptr == 0 && s->in_size == 0 && s->out_ptr == 0 &&
         s->out_size == 0;
}

int main(void) {
  struct ur_descriptor *d = shim_desc();
  CHECK(d->enabled == 1);
  long page = sysconf(_SC_PAGESIZE);

  /* malloc / free, and the slot's announcements */
  char *p = malloc(100);
  CHECK(p && registered_with_size(p, 100));
  struct ur_thread_slot *slot = my_slot();
  CHECK(slot != NULL);
  CHECK(idle(slot));
  memset(p, 1, 100);
  free(p);
  CHECK(!registry_find(p, NULL, NULL));
  CHECK(idle(slot));
  free(NULL);

  /* zero-size malloc: a unique pointer registered with size 0 */
  void *z1 = malloc(0), *z2 = malloc(0);
  CHECK(z1 && z2 && z1 != z2);
  CHECK(registered_with_size(z1, 0) && registered_with_size(z2, 0));
  free(z1);
  free(z2);

  /* calloc: zeroed, overflow */
  int *c = calloc(10, sizeof(int));
  CHECK(c && registered_with_size(c, 40) && idle(slot));
  for (int i = 0; i < 10; i++) CHECK(c[i] == 0);
  free(c);
  errno = 0;
  CHECK(calloc(half, 3) == NULL && errno == ENOMEM);

  /* malloc failure */
  errno = 0;
  CHECK(malloc(huge) == NULL && errno == ENOMEM);

  /* realloc edge cases */
  char *r = realloc(NULL, 50); /* = malloc */
  CHECK(r && registered_with_size(r, 50));
  memset(r, 'x', 50);
  char *r2 = realloc(r, 20); /* shrink */
  CHECK(r2 && registered_with_size(r2, 20));
  CHECK(idle(slot));
  if (r2 != r) CHECK(!registry_find(r, NULL, NULL));
  char *r3 = realloc(r2, 100000); /* grow, almost certainly moves */
  CHECK(r3 && registered_with_size(r3, 100000));
  for (int i = 0; i < 20; i++) CHECK(r3[i] == 'x');
  if (r3 != r2) CHECK(!registry_find(r2, NULL, NULL));
  errno = 0;
  CHECK(realloc(r3, huge) == NULL && errno == ENOMEM);
  CHECK(registered_with_size(r3, 100000)); /* failed realloc keeps the block */
  CHECK(idle(slot));
  CHECK(realloc(r3, 0) == NULL);           /* frees, like glibc */
  CHECK(!registry_find(r3, NULL, NULL));

  /* reallocarray */
  int *ra = reallocarray(NULL, 4, sizeof(int));
  CHECK(ra && registered_with_size(ra, 16));
  errno = 0;
  CHECK(reallocarray(ra, half, 4) == NULL && errno == ENOMEM);
  CHECK(registered_with_size(ra, 16));
  ra = reallocarray(ra, 100, sizeof(int));
  CHECK(ra && registered_with_size(ra, 400));
  free(ra);

  /* posix_memalign */
  void *pm = NULL;
  size_t aligns[] = {8, 16, 32, 64, 256, 4096, 65536};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    CHECK(posix_memalign(&pm, aligns[i], 123) == 0);
    CHECK(aligned(pm, aligns[i]) && registered_with_size(pm, 123));
    free(pm);
  }
  pm = (void *)0x1;
  errno = 1234;
  CHECK(posix_memalign(&pm, 24, 16) == EINVAL); /* not a power of two */
  CHECK(posix_memalign(&pm, 4, 16) == EINVAL);  /* not a multiple of sizeof(void*) */
  CHECK(posix_memalign(&pm, 0, 16) == EINVAL);
  CHECK(posix_memalign(&pm, 64, huge) == ENOMEM);
  CHECK(pm == (void *)0x1 && errno == 1234);

  /* memalign: glibc rounds odd alignments up */
  void *ma = memalign(64, 10);
  CHECK(ma && aligned(ma, 64) && registered_with_size(ma, 10));
  free(ma);
  ma = memalign(48, 10);
  CHECK(ma && aligned(ma, 64) && registered_with_size(ma, 10));
  free(ma);
  errno = 0;
  CHECK(memalign(half + 2, 10) == NULL && errno == EINVAL);

  /* aligned_alloc */
  void *aa = aligned_alloc(128, 256);
  CHECK(aa && aligned(aa, 128) && registered_with_size(aa, 256));
  free(aa);
  /* As the installed glibc: from 2.38 a power of two is required; before,
   * aligned_alloc is memalign, which rounds the alignment up to one. */
  int major = 0, minor = 0;
  sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor);
  int strict = major > 2 || (major == 2 && minor >= 38);
  for (size_t bad = 0; bad < 4; bad += 3) {
    errno = 0;
    void *b = aligned_alloc(bad, 16);
    if (strict) {
      CHECK(b == NULL && errno == EINVAL);
    } else {
      CHECK(b && errno == 0 && registered_with_size(b, 16));
      free(b);
    }
  }

  /* valloc / pvalloc */
  void *va = valloc(10);
  CHECK(va && aligned(va, (size_t)page) && registered_with_size(va, 10));
  free(va);
  void *pv = pvalloc(10);
  CHECK(pv && aligned(pv, (size_t)page) && registered_with_size(pv, (uint64_t)page));
  CHECK(malloc_usable_size(pv) >= (size_t)page);
  free(pv);
  errno = 0;
  CHECK(pvalloc(huge) == NULL && errno == ENOMEM);

  /* malloc_usable_size: the requested size (a scan reads no further) */
  void *u = malloc(5);
  CHECK(malloc_usable_size(u) == 5);
  CHECK(malloc_usable_size(NULL) == 0);
  u = realloc(u, 300);
  CHECK(malloc_usable_size(u) == 300);
  free(u);
  CHECK(idle(slot));

  printf("OK\n");
  return 0;
}
