#include "modules.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "region.h"
#include "state.h"

/* A process loads tens of objects; plugin hosts that load and unload the
 * same ones again reuse their entries. */
#define MODULES_CAPACITY 4096u
#define STRINGS_SIZE (1u << 20)
#define BUILD_ID_MAX 32u

static struct ur_module_table *table;
static struct ur_module *mods;
static char *strings;
static uint32_t strings_used;    /* under `lock` */
/* The pid of the process whose thread holds the table (0: free): a lock a
 * fork copied held belongs to another pid and is taken over. */
static uint64_t lock;
static unsigned long long seen_adds, seen_subs; /* the loader's counters when last recorded */
static char exe_path[4096];

void ur_modules_init(void) {
  ssize_t n = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
  exe_path[n > 0 ? n : 0] = '\0';
  if (!ur_g.bt_frames) return; /* no backtraces: no pc to name */
  struct ur_module_table *t = ur_region_alloc(sizeof *t);
  mods = ur_region_alloc(MODULES_CAPACITY * sizeof *mods);
  strings = ur_region_alloc(STRINGS_SIZE);
  if (!t || !mods || !strings) return;
  t->modules = (uint64_t)(uintptr_t)mods;
  t->strings = (uint64_t)(uintptr_t)strings;
  t->capacity = MODULES_CAPACITY;
  t->strings_size = STRINGS_SIZE;
  table = t;
  unreachable_descriptor.modules = (uint64_t)(uintptr_t)t;
}

const char *ur_object_path(const char *name) {
  if (name && exe_path[0] && program_invocation_name &&
      strcmp(name, program_invocation_name) == 0)
    return exe_path;
  return name;
}

static int take_lock(void) {
  uint64_t me = unreachable_descriptor.pid; /* reset in a fork child */
  for (int i = 0; i < 1000; i++) {
    uint64_t held = __atomic_load_n(&lock, __ATOMIC_RELAXED);
    if (held != me &&
        __atomic_compare_exchange_n(&lock, &held, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return 1;
    sched_yield();
  }
  return 0;
}

static void drop_lock(void) { __atomic_store_n(&lock, 0, __ATOMIC_RELEASE); }

static uint32_t build_id(const struct dl_phdr_info *info, uint8_t out[BUILD_ID_MAX]) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
    const char *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
      size_t name = (nh->n_namesz + 3u) & ~3u, desc = (nh->n_descsz + 3u) & ~3u;
      const char *d = p + sizeof *nh + name;
      if (d + nh->n_descsz > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
          memcmp(p + sizeof *nh, "GNU", 4) == 0 && nh->n_descsz <= BUILD_ID_MAX) {
        memcpy(out, d, nh->n_descsz);
        return nh->n_descsz;
      }
      p = d + desc;
    }
  }
  return 0;
}

/* The object's absolute path written at strings + strings_used (not yet
 * kept); its length, or 0 when it does not fit. A relative name (dlopen of
 * "./x.so") is taken from the current directory, as the loader opened it. */
static uint32_t compose_path(const char *name) {
  char *at = strings + strings_used;
  size_t room = STRINGS_SIZE - strings_used, len = 0;
  if (name[0] != '/') {
    if (!getcwd(at, room)) return 0;
    len = strlen(at);
    while (name[0] == '.' && name[1] == '/') name += 2;
    if (len + 1 >= room) return 0;
    if (len == 0 || at[len - 1] != '/') at[len++] = '/';
  }
  size_t n = strlen(name);
  if (len + n + 1 > room) return 0;
  memcpy(at + len, name, n + 1);
  return (uint32_t)(len + n);
}

/* Record one object unless it is recorded already; 0 if it could not be. */
static int record(const struct dl_phdr_info *info) {
  const char *name = info->dlpi_name;
  if (!name || !strchr(name, '/')) return 1; /* the main program, the vDSO */
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    if (ph->p_vaddr < lo) lo = ph->p_vaddr;
    if (ph->p_vaddr + ph->p_memsz > hi) hi = ph->p_vaddr + ph->p_memsz;
  }
  if (lo >= hi) return 1;
  uint64_t bias = info->dlpi_addr, start = bias + lo, end = bias + hi;
  if (!take_lock()) return 0;
  int ok = 0;
  uint32_t len = compose_path(name);
  if (len) {
    const char *path = strings + strings_used;
    uint32_t n = table->count;
    ok = 1;
    for (uint32_t i = 0; i < n; i++) {
      const struct ur_module *m = &mods[i];
      if (m->bias == bias && m->start == start && m->end == end && m->path_len == len &&
          memcmp(strings + m->path, path, len) == 0)
        goto out; /* known: loaded again where it was */
    }
    if (n < table->capacity) {
      struct ur_module *m = &mods[n];
      m->bias = bias;
      m->start = start;
      m->end = end;
      m->path = strings_used;
      m->path_len = len;
      m->build_id_len = build_id(info, m->build_id);
      strings_used += len + 1;
      __atomic_store_n(&table->count, n + 1, __ATOMIC_RELEASE);
      goto out;
    }
  }
  ok = 0;
  __atomic_fetch_add(&table->lost, 1, __ATOMIC_RELAXED);
out:
  drop_lock();
  return ok;
}

struct walk {
  int changed, complete;
  unsigned long long adds, subs;
};

static int visit(struct dl_phdr_info *info, size_t size, void *arg) {
  struct walk *w = arg;
  if (!w->changed) {
    if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
      w->adds = w->subs = 0; /* a loader without the counters: look every time */
    } else {
      w->adds = info->dlpi_adds;
      w->subs = info->dlpi_subs;
      if (w->adds == __atomic_load_n(&seen_adds, __ATOMIC_RELAXED) &&
          w->subs == __atomic_load_n(&seen_subs, __ATOMIC_RELAXED) && w->adds)
        return 1; /* nothing loaded or unloaded since the last look */
    }
    w->changed = 1;
  }
  if (!record(info)) w->complete = 0;
  return 0;
}

void ur_modules_note(void) {
  if (!table) return;
  struct walk w = {0, 1, 0, 0};
  /* Our lock is taken only inside the callback, which runs under the
   * loader's: never the other way round. */
  dl_iterate_phdr(visit, &w);
  if (w.changed && w.complete) {
    __atomic_store_n(&seen_adds, w.adds, __ATOMIC_RELAXED);
    __atomic_store_n(&seen_subs, w.subs, __ATOMIC_RELAXED);
  }
}
