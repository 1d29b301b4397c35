#include "unwind.h"

#include <limits.h>
#include <link.h>

#include "lock.h"
#include "sandbox.h"

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
  /* libunwind starts here: it makes its pipe and tries mincore() once,
   * calls a filter the process started under may refuse (sandbox.c). */
  ur_sandbox_init();
  ur_tls.unwinding++;
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  ur_tls.unwinding--;
  dl_iterate_phdr(find_self, NULL);
}

size_t ur_unwind(uintptr_t *out, size_t max) { return ur_unwind_here(out, max); }

/* Arrived while a fork holds the gate: step out, let the forker see the count
 * fall, and come back once it has opened. The forker itself goes through
 * (its other fork handlers, or a handler's malloc, may take a backtrace). */
void ur_unwind_wait_gate(void) {
  uint32_t gate, self = ur_self_tid();
  while ((gate = __atomic_load_n(&ur_fork->unwind_gate, __ATOMIC_SEQ_CST)) != 0 && gate != self) {
    __atomic_fetch_sub(&ur_g.unwinders, 1, __ATOMIC_SEQ_CST);
    ur_unwind_wake_gate();
    int saved = errno;
    ur_futex(&ur_fork->unwind_gate, FUTEX_WAIT_PRIVATE, gate);
    errno = saved;
    __atomic_fetch_add(&ur_g.unwinders, 1, __ATOMIC_SEQ_CST);
  }
}

void ur_unwind_wake_gate(void) {
  int saved = errno;
  ur_futex(&ur_g.unwinders, FUTEX_WAKE_PRIVATE, INT_MAX);
  errno = saved;
}

/* Called last in fork's prepare handler, with every other lock held: a thread
 * waiting at the gate then holds none that the fork still needs. The forker's
 * own count stays (a signal handler's fork that interrupted its own unwind). */
void ur_unwind_gate_close(uint32_t tid) {
  __atomic_store_n(&ur_fork->unwind_gate, tid, __ATOMIC_SEQ_CST);
  uint32_t n;
  while ((n = __atomic_load_n(&ur_g.unwinders, __ATOMIC_SEQ_CST)) > ur_tls.unwinding) {
    int saved = errno;
    ur_futex(&ur_g.unwinders, FUTEX_WAIT_PRIVATE, n);
    errno = saved;
  }
}

/* Only the forker's own gate: once it has given back its locks the next
 * forker may already have closed the gate for itself, and opening that would
 * let threads in that no longer wake it as they leave. */
void ur_unwind_gate_open(uint32_t tid) {
  uint32_t mine = tid;
  __atomic_compare_exchange_n(&ur_fork->unwind_gate, &mine, 0, 0, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
  int saved = errno;
  ur_futex(&ur_fork->unwind_gate, FUTEX_WAKE_PRIVATE, INT_MAX);
  /* Only if changed: errno's page, shared with a child just forked, would
   * take a fault and a copy for a store of the same value. */
  if (errno != saved) errno = saved;
}

/* Only the forking thread is left, with whatever unwind it was inside. */
void ur_unwind_gate_after_fork_child(void) {
  ur_g.unwinders = ur_tls.unwinding;
  ur_fork->unwind_gate = 0;
}
