/* A heap of blocks of 16 B to 64 KiB, HEAP_KIB of them in all, under
 * whatever address-space limit (ulimit -v) the test set: every other block
 * kept in an array, every fourth dropped. The READY line also gives the
 * process's VmSize and the part of it that is the shim's own memory.
 * usage: vsz_limit HEAP_KIB */
#include <dlfcn.h>
#include <stdint.h>

#include "scenario.h"
#include "unreachable/abi.h"

static long vmsize_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

/* The pieces of address space the shim reserved (0 without it). */
static long shim_kb(void) {
  const struct ur_descriptor *d = dlsym(RTLD_DEFAULT, UR_DESCRIPTOR_SYMBOL);
  if (!d || !d->regions) return 0;
  const struct ur_region_span *s = (const struct ur_region_span *)(uintptr_t)d->regions;
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < d->num_regions; i++) bytes += s[i].end - s[i].begin;
  return (long)(bytes >> 10);
}

int main(int argc, char **argv) {
  long heap = (argc > 1 ? atol(argv[1]) : 1024) << 10;
  long cap = heap / 16 + 16, n = 0, leaked = 0, leak_bytes = 0;
  void **keep = malloc(sizeof(void *) * (size_t)cap);
  if (!keep) return 2;
  for (long used = 0, i = 0; used < heap && n < cap; i++) {
    size_t size = (size_t)16 << (i % 13); /* 16 B .. 64 KiB */
    size += (size_t)(i * 7) % 16;
    char *p = malloc(size);
    if (!p) return 3; /* the test leaves room for the heap it asks for */
    p[0] = 1;
    used += (long)size;
    if (i % 4 == 3) {
      KEEP(p);
      leaked++;
      leak_bytes += (long)size;
    } else {
      keep[n++] = p;
    }
  }
  wipe();
  ready("leak_count=%ld leak_bytes=%ld vmsize_kb=%ld shim_kb=%ld", leaked, leak_bytes, vmsize_kb(),
        shim_kb());
  wait_for_test();
  KEEP(keep);
  return 0;
}
