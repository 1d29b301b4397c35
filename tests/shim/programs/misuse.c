/* One misuse of the allocator per run (argv[1]); prints what the call returned
 * and errno, so a run under the shim can be compared with one under glibc. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *t = argv[1]; void *p = 0; int r;
  setvbuf(stdout, 0, _IONBF, 0);
  errno = 0;
  if (!strcmp(t, "malloc_max")) { p = malloc(SIZE_MAX); printf("malloc(SIZE_MAX)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "malloc_max_m64")) { p = malloc(SIZE_MAX - 64); printf("malloc(SIZE_MAX-64)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "malloc_half")) { p = malloc(SIZE_MAX / 2 + 1); printf("malloc(SIZE_MAX/2+1)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "malloc_ptrdiff")) { p = malloc(PTRDIFF_MAX); printf("malloc(PTRDIFF_MAX)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "malloc_huge_ok")) { p = malloc((size_t)1 << 40); printf("malloc(1TB)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "calloc_ovf")) { p = calloc(SIZE_MAX / 2, 4); printf("calloc(SIZE_MAX/2,4)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "calloc_ovf2")) { p = calloc((size_t)1 << 32, (size_t)1 << 32); printf("calloc(2^32,2^32)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "realloc_max")) { void *q = malloc(10); p = realloc(q, SIZE_MAX); printf("realloc(p,SIZE_MAX)=%p errno=%d old_still_valid=%d\n", p, errno, q != 0); if (!p) { memset(q, 1, 10); free(q); } }
  else if (!strcmp(t, "reallocarray_ovf")) { p = reallocarray(0, SIZE_MAX / 2, 4); printf("reallocarray ovf=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "memalign_bad")) { r = posix_memalign(&p, 3, 16); printf("posix_memalign(align=3)=%d (EINVAL=%d) p=%p\n", r, EINVAL, p); }
  else if (!strcmp(t, "memalign_zero")) { r = posix_memalign(&p, 0, 16); printf("posix_memalign(align=0)=%d p=%p\n", r, p); }
  else if (!strcmp(t, "memalign_4")) { r = posix_memalign(&p, 4, 16); printf("posix_memalign(align=4)=%d p=%p\n", r, p); }
  else if (!strcmp(t, "memalign_huge")) { r = posix_memalign(&p, (size_t)1 << 62, 16); printf("posix_memalign(align=2^62)=%d (ENOMEM=%d) p=%p\n", r, ENOMEM, p); }
  else if (!strcmp(t, "memalign_sizemax")) { r = posix_memalign(&p, 64, SIZE_MAX); printf("posix_memalign(64,SIZE_MAX)=%d p=%p\n", r, p); }
  else if (!strcmp(t, "aligned_alloc_bad")) { p = aligned_alloc(3, 16); printf("aligned_alloc(3,16)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "aligned_alloc_notmultiple")) { p = aligned_alloc(64, 100); printf("aligned_alloc(64,100)=%p errno=%d\n", p, errno); free(p); }
  else if (!strcmp(t, "memalign_old_bad")) { p = memalign(3, 16); printf("memalign(3,16)=%p errno=%d\n", p, errno); free(p); }
  else if (!strcmp(t, "memalign_old_huge")) { p = memalign((size_t)1 << 63, 16); printf("memalign(2^63,16)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "valloc_max")) { p = valloc(SIZE_MAX); printf("valloc(SIZE_MAX)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "pvalloc_max")) { p = pvalloc(SIZE_MAX - 100); printf("pvalloc(SIZE_MAX-100)=%p errno=%d\n", p, errno); }
  else if (!strcmp(t, "malloc0")) { p = malloc(0); printf("malloc(0)=%s usable=%zu\n", p ? "nonnull" : "NULL", malloc_usable_size(p)); free(p); }
  else if (!strcmp(t, "realloc0")) { void *q = malloc(10); p = realloc(q, 0); printf("realloc(p,0)=%s\n", p ? "nonnull" : "NULL"); free(p); }
  else if (!strcmp(t, "free_null")) { free(0); printf("free(NULL) ok\n"); }
  else if (!strcmp(t, "double_free")) { void *q = malloc(32); free(q); free(q); printf("double free survived\n"); }
  else if (!strcmp(t, "double_free_big")) { void *q = malloc(1 << 20); free(q); free(q); printf("double free (mmap chunk) survived\n"); }
  else if (!strcmp(t, "free_bad")) { free((void *)0x12345678); printf("free(bad) survived\n"); }
  else if (!strcmp(t, "free_stack")) { char buf[64]; free(buf + 16); printf("free(stack) survived\n"); }
  else if (!strcmp(t, "free_interior")) { char *q = malloc(64); free(q + 16); printf("free(interior) survived\n"); }
  else if (!strcmp(t, "realloc_freed")) { void *q = malloc(32); free(q); p = realloc(q, 64); printf("realloc(freed) survived %p\n", p); }
  else if (!strcmp(t, "realloc_bad")) { p = realloc((void *)0x12345678, 64); printf("realloc(bad) survived %p\n", p); }
  else if (!strcmp(t, "usable_bad")) { size_t s = malloc_usable_size((void *)0x12345678); printf("malloc_usable_size(bad)=%zu\n", s); }
  else if (!strcmp(t, "usable_null")) { size_t s = malloc_usable_size(0); printf("malloc_usable_size(NULL)=%zu\n", s); }
  else if (!strcmp(t, "overflow_write")) { char *q = malloc(24); memset(q, 'x', 40); free(q); printf("heap overflow then free survived\n"); }
  else { printf("unknown test\n"); return 3; }
  return 0;
}
