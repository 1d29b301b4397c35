/*
 * The pin gate (pin_gate.h): a few slots, one per process held stopped.
 * Readers count themselves in a slot before they look at its pid, the
 * forbidder clears the pid before it looks at the count (both sequentially
 * consistent): a reader either sees the pid gone, or is counted, and the
 * forbidder waits for it. Readers never block.
 */
#include "pin_gate.h"

#include <sched.h>

#define SLOTS 16

static struct {
  pid_t pid;
  int readers;
} slots[SLOTS];

void ur_pin_allow(pid_t pid) {
  if (pid <= 0) return;
  for (int i = 0; i < SLOTS; i++)
    if (__atomic_load_n(&slots[i].pid, __ATOMIC_SEQ_CST) == pid) return;
  for (int i = 0; i < SLOTS; i++) {
    pid_t free_slot = 0;
    /* A slot whose last readers are still leaving keeps its count: taken
     * all the same, they leave it as they found it. */
    if (__atomic_compare_exchange_n(&slots[i].pid, &free_slot, pid, 0, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST))
      return;
  }
  /* No slot: that process is read through /proc/PID/mem. */
}

void ur_pin_forbid(pid_t pid) {
  if (pid <= 0) return;
  for (int i = 0; i < SLOTS; i++) {
    pid_t want = pid;
    if (!__atomic_compare_exchange_n(&slots[i].pid, &want, 0, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
      continue;
    /* A reader counted here passed the gate (or is about to find it shut
     * and leave): a pin of at most a chunk. */
    while (__atomic_load_n(&slots[i].readers, __ATOMIC_SEQ_CST)) sched_yield();
  }
}

int ur_pin_enter(pid_t pid) {
  if (pid <= 0) return 0;
  for (int i = 0; i < SLOTS; i++) {
    if (__atomic_load_n(&slots[i].pid, __ATOMIC_RELAXED) != pid) continue;
    __atomic_fetch_add(&slots[i].readers, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&slots[i].pid, __ATOMIC_SEQ_CST) == pid) return i + 1;
    __atomic_fetch_sub(&slots[i].readers, 1, __ATOMIC_SEQ_CST);
    return 0;
  }
  return 0;
}

void ur_pin_leave(int token) {
  if (token > 0) __atomic_fetch_sub(&slots[token - 1].readers, 1, __ATOMIC_SEQ_CST);
}
