#include "huge_arenas.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "self_maps.h"
#include "unreachable/abi.h" /* UR_MANGLE */

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define HEAP_MAX ((uint64_t)64 << 20) /* glibc's HEAP_MAX_SIZE on 64-bit */
#define HUGE ((uint64_t)2 << 20)
#define MAX_HEAPS 512
#define STEP_RANGES 16 /* ~25 ms of the helper's time per step */

/* glibc's heap_info, at the start of every arena heap (malloc/arena.c). */
struct heap_info {
  uint64_t ar_ptr, prev, size, mprotect_size;
};

/* Heaps seen, with the 2 MiB ranges already collapsed or given up on: each
 * is collapsed once, so memory glibc later returns to the kernel stays
 * returned. Bases are kept mangled, as every address in shim memory. */
static struct {
  uint64_t mangled_base;
  uint32_t done;
} heaps[MAX_HEAPS];
static unsigned nheaps;

int ur_huge_arenas_wanted(void) {
  static int wanted = -1;
  if (wanted < 0) {
    const char *t = getenv("GLIBC_TUNABLES");
    wanted = 0;
    for (const char *p = t; p && (p = strstr(p, "glibc.malloc.hugetlb=")) != NULL; p++) {
      const char *v = p + strlen("glibc.malloc.hugetlb=");
      if ((p == t || p[-1] == ':') && v[0] == '1' && (v[1] == ':' || v[1] == '\0')) wanted = 1;
    }
  }
  return wanted;
}

static uint32_t *done_mask(uint64_t base) {
  uint64_t key = UR_MANGLE(base);
  for (unsigned i = 0; i < nheaps; i++)
    if (heaps[i].mangled_base == key) return &heaps[i].done;
  if (nheaps == MAX_HEAPS) return NULL;
  heaps[nheaps].mangled_base = key;
  heaps[nheaps].done = 0;
  return &heaps[nheaps++].done;
}

/* The end of the part of an arena heap glibc uses (heap_info.size), or 0
 * when [lo, hi) is no arena heap: 64 MiB aligned, its heap_info agreeing
 * with the mapping (glibc keeps mprotect_size = the read-write part). What
 * lies past that end glibc has trimmed (MADV_DONTNEED leaves it read-write)
 * or not used yet: collapsing it would fill it again. Read through
 * /proc/self/mem: glibc may unmap a heap after we read the maps, and a load
 * would then kill the process. */
static uint64_t arena_heap_end(int mem, uint64_t lo, uint64_t hi) {
  if (lo % HEAP_MAX || hi - lo > HEAP_MAX) return 0;
  struct heap_info h;
  if (pread(mem, &h, sizeof(h), (off_t)lo) != (ssize_t)sizeof(h)) return 0;
  if (h.ar_ptr == 0 || h.mprotect_size != hi - lo || h.size > h.mprotect_size) return 0;
  return lo + h.size;
}

/* "lo-hi rw-p offset dev inode [path]": a private read-write mapping with no
 * file, unnamed or named by glibc (2.39+ names its arenas). */
static int anonymous_rw(const char *rest) {
  char perms[5];
  unsigned long long offset, inode;
  int n = 0;
  if (sscanf(rest, " %4s %llx %*s %llu %n", perms, &offset, &inode, &n) != 3 || n == 0) return 0;
  if (strcmp(perms, "rw-p") != 0 || inode != 0) return 0;
  return rest[n] == '\0' || strncmp(rest + n, "[anon: glibc: malloc arena]", 27) == 0;
}

/* Collapse the heap's whole ranges not done yet; returns how many it tried,
 * or -1 when it stopped early. */
static int collapse_heap(uint64_t lo, uint64_t hi, int budget, int (*stop)(void *), void *arg) {
  uint32_t *done = done_mask(lo);
  if (!done) return 0;
  int tried = 0;
  for (uint64_t r = lo; r + HUGE <= hi && tried < budget; r += HUGE) {
    uint32_t bit = UINT32_C(1) << ((r - lo) / HUGE);
    if (*done & bit) continue;
    if (stop(arg)) return -1;
    tried++;
    if (madvise((void *)(uintptr_t)r, HUGE, MADV_COLLAPSE) == 0 || errno != EAGAIN) *done |= bit;
  }
  return tried;
}

struct step {
  int mem;    /* /proc/self/mem */
  int budget; /* ranges left to try in this step */
  int (*stop)(void *);
  void *arg;
};

static int step_mapping(uint64_t lo, uint64_t hi, const char *rest, void *arg) {
  struct step *st = arg;
  uint64_t end;
  if (anonymous_rw(rest) && (end = arena_heap_end(st->mem, lo, hi)) != 0) {
    int tried = collapse_heap(lo, end, st->budget, st->stop, st->arg);
    st->budget = tried < 0 ? 0 : st->budget - tried;
  }
  return st->budget <= 0;
}

int ur_huge_arenas_step(int (*stop)(void *), void *arg) {
  int saved = errno;
  struct step st = {open("/proc/self/mem", O_RDONLY | O_CLOEXEC), STEP_RANGES, stop, arg};
  if (st.mem >= 0) {
    ur_self_maps_foreach(step_mapping, &st);
    close(st.mem);
  }
  errno = saved;
  return st.mem >= 0 && st.budget <= 0; /* perhaps more: another step finds out */
}
