#include "unwind.h"

#include <link.h>

#include "state.h"

/* Find the shim's executable segment so its frames can be dropped. */
static int find_self(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  uintptr_t self = (uintptr_t)&ur_unwind;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (self >= lo && self < hi) {
      ur_g.text_lo = lo;
      ur_g.text_hi = hi;
      return 1;
    }
  }
  return 0;
}

void ur_unwind_init(void) {
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  dl_iterate_phdr(find_self, NULL);
}

size_t ur_unwind(uintptr_t *out, size_t max) { return ur_unwind_here(out, max); }
