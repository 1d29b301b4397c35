/*
 * The alternate signal stacks threads set. A program may malloc one, give
 * it to sigaltstack() and keep no pointer of its own: only the kernel holds
 * it then, and a scan of memory would report it leaked (LeakSanitizer
 * does: https://github.com/llvm/llvm-project/issues/63313). /proc shows no
 * thread's alternate stack, so the shim stands in front of sigaltstack() and
 * notes each thread's in a table the scanner reads (abi.h struct
 * ur_altstack).
 */
#include "altstack.h"

#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "region.h"
#include "state.h"
#include "threads.h"

#define ALTSTACKS 1024u /* threads with an alternate stack at once */

static struct ur_altstack *table;

int ur_altstacks_init(void) {
  table = ur_region_alloc(ALTSTACKS * sizeof(*table));
  if (!table) return -1;
  unreachable_descriptor.altstacks = (uint64_t)(uintptr_t)table;
  unreachable_descriptor.num_altstacks = ALTSTACKS;
  return 0;
}

/* This thread's entry: its own, a free one, or one of a thread that has
 * exited; NULL if every entry is another live thread's. */
static struct ur_altstack *entry_for(uint32_t tid) {
  struct ur_altstack *free_one = NULL;
  for (unsigned i = 0; i < ALTSTACKS; i++) {
    uint32_t t = __atomic_load_n(&table[i].tid, __ATOMIC_ACQUIRE);
    if (t == tid) return &table[i];
    if (!t && !free_one) free_one = &table[i];
  }
  uint32_t none = 0;
  if (free_one && __atomic_compare_exchange_n(&free_one->tid, &none, tid, 0, __ATOMIC_ACQ_REL,
                                              __ATOMIC_RELAXED))
    return free_one;
  /* Taken meanwhile, or none free: any that is free now, or whose thread is gone. */
  for (unsigned i = 0; i < ALTSTACKS; i++) {
    uint32_t t = __atomic_load_n(&table[i].tid, __ATOMIC_ACQUIRE);
    if ((!t || ur_tid_gone(t)) &&
        __atomic_compare_exchange_n(&table[i].tid, &t, tid, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
      return &table[i];
  }
  return NULL;
}

UR_EXPORT int sigaltstack(const stack_t *ss, stack_t *old) {
  long r = syscall(SYS_sigaltstack, ss, old);
  if (r != 0 || !ss || !table) return (int)r;
  int saved = errno;
  struct ur_altstack *e = entry_for(ur_self_tid());
  if (e) {
    int off = (ss->ss_flags & SS_DISABLE) != 0;
    __atomic_store_n(&e->size, off ? 0 : (uint64_t)ss->ss_size, __ATOMIC_RELAXED);
    __atomic_store_n(&e->sp, off ? 0 : (uint64_t)(uintptr_t)ss->ss_sp, __ATOMIC_RELEASE);
  }
  errno = saved;
  return 0;
}

void ur_altstacks_after_fork_child(uint32_t old_tid, uint32_t new_tid) {
  if (!table) return;
  for (unsigned i = 0; i < ALTSTACKS; i++) {
    if (table[i].tid == old_tid && old_tid) {
      table[i].tid = new_tid; /* the kernel gave the child the same stack */
    } else {
      table[i].tid = 0;
      table[i].sp = table[i].size = 0;
    }
  }
}
