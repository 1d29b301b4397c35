/*
 * Heap dumps (bionic's backtrace heap dump: "Android Native Heap Dump v1.2")
 * and leak_track's report at exit: every live block of the registry, copied
 * under malloc_disable and sorted without allocating.
 */
#include "debug_dump.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "debug_config.h"
#include "debug_log.h"
#include "helper.h"
#include "registry.h"
#include "stacks.h"
#include "state.h"
#include "unreachable/malloc_debug.h"

struct drec {
  uint64_t a; /* size (dump) or mangled pointer (leaks) */
  uint64_t b; /* size (leaks) */
  uint32_t id;
  uint32_t pad;
};

typedef bool (*before_fn)(const struct drec *, const struct drec *);

static void sift(struct drec *r, size_t i, size_t n, before_fn before) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && before(&r[c], &r[c + 1])) c++;
    if (!before(&r[i], &r[c])) return;
    struct drec t = r[i];
    r[i] = r[c];
    r[c] = t;
    i = c;
  }
}

/* Heapsort: no allocation, no recursion. */
static void sort_recs(struct drec *r, size_t n, before_fn before) {
  for (size_t i = n / 2; i-- > 0;) sift(r, i, n, before);
  for (size_t end = n; end-- > 1;) {
    struct drec t = r[0];
    r[0] = r[end];
    r[end] = t;
    sift(r, 0, end, before);
  }
}

/* -1, 0, 1: backtrace order of write_dump (present first, deeper first, pcs). */
static int cmp_stacks(uint32_t ia, uint32_t ib) {
  if (ia == ib) return 0;
  size_t na, nb;
  const uint64_t *fa = ur_stacks_frames(ia, &na), *fb = ur_stacks_frames(ib, &nb);
  if ((na > 0) != (nb > 0)) return na > 0 ? -1 : 1;
  if (na != nb) return na > nb ? -1 : 1;
  for (size_t i = 0; i < na; i++)
    if (fa[i] != fb[i]) return fa[i] < fb[i] ? -1 : 1;
  return 0;
}

static bool dump_before(const struct drec *x, const struct drec *y) {
  if (x->a != y->a) return x->a > y->a; /* size descending */
  return cmp_stacks(x->id, y->id) < 0;
}

/* PointerData::GetList's order for leak_track. */
static bool leak_before(const struct drec *x, const struct drec *y) {
  if (x->b != y->b) return x->b > y->b;
  size_t na, nb;
  ur_stacks_frames(x->id, &na);
  ur_stacks_frames(y->id, &nb);
  if ((na > 0) != (nb > 0)) return na > 0;
  if (na != nb) return na > nb;
  return UR_UNMANGLE(x->a) < UR_UNMANGLE(y->a);
}

struct collect_ctx {
  struct drec *r;
  size_t n, cap;
  bool leaks;
};

static void collect_one(uint64_t key, uint64_t size, uint32_t stack_id, void *arg) {
  struct collect_ctx *c = arg;
  if (c->n >= c->cap || ur_helper_owns(key)) return; /* the helper's, not the program's */
  struct drec *d = &c->r[c->n++];
  d->a = c->leaks ? key : size; /* pointers stay mangled in the copy */
  d->b = size;
  d->id = stack_id;
  d->pad = 0;
}

/* Every live allocation, copied under malloc_disable (one consistent set). */
static struct drec *collect(size_t *count, size_t *bytes, bool leaks) {
  malloc_disable();
  size_t total = (size_t)ur_registry_count();
  size_t cap = total ? total : 1;
  *bytes = cap * sizeof(struct drec);
  void *m = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  struct collect_ctx c = {m == MAP_FAILED ? NULL : m, 0, cap, leaks};
  if (c.r) ur_registry_foreach(0, collect_one, &c); /* disabled: nothing moves */
  malloc_enable();
  *count = c.n;
  return c.r;
}

static void fingerprint(char *out, size_t len) {
  struct utsname u;
  if (uname(&u) == 0)
    snprintf(out, len, "%s/%s/%s", u.sysname, u.release, u.machine);
  else
    snprintf(out, len, "unknown");
}

void ur_dump_heap(const char *path) {
  const char *why;
  int fd = ur_open_output(path, &why);
  if (fd < 0) {
    ur_dlog("Unable to create file: %s: %s", path, why ? why : strerrordesc_np(errno));
    return;
  }
  ur_dlog("Dumping to file: %s", path);
  size_t n, mapped;
  struct drec *r = collect(&n, &mapped, false);
  if (!r) n = 0;
  if (r) sort_recs(r, n, dump_before);
  size_t groups = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    total += r[i].a;
    if (i == 0 || r[i].a != r[i - 1].a || r[i].id != r[i - 1].id) groups++;
  }
  static struct ur_bw w; /* dumps are serialised: the helper, or exit */
  char fp[256];
  fingerprint(fp, sizeof fp);
  w.fd = fd;
  w.len = 0;
  ur_bw_printf(&w,
               "Android Native Heap Dump v1.2\n\nBuild fingerprint: '%s'\n\nTotal memory: %" PRIu64
               "\nAllocation records: %zu\nBacktrace size: %u\n\n",
               fp, total, groups, ur_g.bt_frames);
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && r[j].a == r[i].a && r[j].id == r[i].id) j++;
    ur_bw_printf(&w, "z 0  sz %8" PRIu64 "  num    %zu  bt", r[i].a, j - i);
    size_t nf;
    const uint64_t *f = ur_stacks_frames(r[i].id, &nf);
    for (size_t k = 0; k < nf; k++) ur_bw_printf(&w, " %" PRIx64, f[k]);
    ur_bw_printf(&w, "\n");
    if (ur_debug.o.backtrace_full && nf) {
      ur_bw_printf(&w, "  bt_info");
      for (size_t k = 0; k < nf; k++) {
        struct ur_pc_name pn = ur_name_pc((uintptr_t)f[k]);
        ur_bw_printf(&w, " {\"%s\" %" PRIxPTR " \"%s\" %" PRIxPTR "}", pn.file, pn.rel,
                     pn.sym ? pn.sym : "", pn.off);
      }
      ur_bw_printf(&w, "\n");
    }
    i = j;
  }
  ur_bw_printf(&w, "MAPS\n");
  ur_bw_flush(&w);
  int maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (maps >= 0) {
    ssize_t got;
    while ((got = read(maps, w.buf, sizeof w.buf)) > 0 || (got < 0 && errno == EINTR)) {
      if (got <= 0) continue;
      w.len = (size_t)got;
      ur_bw_flush(&w);
    }
    close(maps);
  }
  ur_bw_printf(&w, "END\n");
  ur_bw_flush(&w);
  close(fd);
  if (r) munmap(r, mapped);
}

void ur_log_leaks(void) {
  size_t n, mapped;
  struct drec *r = collect(&n, &mapped, true);
  if (!r) return;
  sort_recs(r, n, leak_before);
  for (size_t i = 0; i < n; i++) {
    ur_dlog("+++ %s leaked block of size %" PRIu64 " at 0x%" PRIxPTR " (leak %zu of %zu)",
            ur_debug.prog, r[i].b, UR_UNMANGLE(r[i].a), i + 1, n);
    if (r[i].id) {
      ur_dlog("Backtrace at time of allocation:");
      ur_log_stack_id(r[i].id);
    }
  }
  munmap(r, mapped);
}
