/* The registry out of room: region.c, registry.c and size_map.c alone, under
 * an address-space limit set once they are initialised, with a few MiB of
 * room. Blocks with a stack id (shard entries) are registered at made-up
 * addresses until a shard's table can grow no more: the blocks left out are
 * counted in the descriptor and said once on stderr, lookups of the rest
 * still answer, and the region's pieces are all listed. No sanitizer: ASan
 * wants terabytes of address space. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "region.h"
#include "registry.h"
#include "shim_globals.h"

#define CHECK(c)                                                      \
  do {                                                                \
    if (!(c)) {                                                       \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

static long vmsize_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld", &kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  ur_self_tid();
  CHECK(ur_region_init() == 0);
  CHECK(ur_registry_init() == 0);
  /* stdio's buffers first: nothing of ours allocates after the limit. */
  printf("limit\n");
  rlim_t room = (rlim_t)vmsize_bytes() + (8u << 20);
  struct rlimit lim = {room, room};
  CHECK(setrlimit(RLIMIT_AS, &lim) == 0);
  uint64_t i = 0;
  /* Made-up addresses, 16 apart, with stack id 1: every one a shard entry. */
  for (; i < (UINT64_C(1) << 24) && !unreachable_descriptor.unregistered; i++)
    ur_registry_insert((void *)(uintptr_t)(0x100000000 + i * 16), 24, 1);
  CHECK(unreachable_descriptor.unregistered == 1);
  CHECK(ur_region_error() != 0);
  /* Everything registered before is still found, the one left out is not. */
  uint64_t size;
  uint32_t id;
  for (uint64_t j = 0; j + 1 < i; j += 97)
    CHECK(ur_registry_find((void *)(uintptr_t)(0x100000000 + j * 16), &size, &id) && size == 24);
  CHECK(!ur_registry_find((void *)(uintptr_t)(0x100000000 + (i - 1) * 16), &size, &id));
  /* More blocks, until another is left out: counted, said only once. */
  for (uint64_t j = 0; j < (UINT64_C(1) << 24) && unreachable_descriptor.unregistered < 2; j++)
    ur_registry_insert((void *)(uintptr_t)(0x900000000 + j * 16), 24, 1);
  CHECK(unreachable_descriptor.unregistered == 2);
  CHECK(unreachable_descriptor.num_regions >= 1 && unreachable_descriptor.regions);
  printf("OK %llu\n", (unsigned long long)i);
  return 0;
}
