#include "between_calls.h"

static struct {
  uint32_t gen;     /* the latest waiter's generation */
  uint32_t waiters; /* in progress: the flag stays up while any is */
  uint32_t seen[UR_MAX_THREADS]; /* per slot: the generation last seen between calls */
} bc;

/* UR_MAX_THREADS for a slot not in the shared table (ur_tls.unshared). */
static uint32_t slot_index(const struct ur_thread_slot *s) {
  uintptr_t off = (uintptr_t)s - (uintptr_t)ur_g.threads;
  return off < UR_MAX_THREADS * sizeof *s ? (uint32_t)(off / sizeof *s) : UR_MAX_THREADS;
}

static void raise_flag(void) {
  if (!(ur_load32(&ur_g.slow) & UR_SLOW_BETWEEN_CALLS))
    __atomic_fetch_or(&ur_g.slow, UR_SLOW_BETWEEN_CALLS, __ATOMIC_SEQ_CST);
}

uint32_t ur_calls_wait_begin(void) {
  __atomic_fetch_add(&bc.waiters, 1, __ATOMIC_SEQ_CST);
  uint32_t gen = __atomic_add_fetch(&bc.gen, 1, __ATOMIC_SEQ_CST);
  raise_flag();
  return gen;
}

int ur_calls_seen_between(const struct ur_thread_slot *s, uint32_t gen) {
  uint32_t i = slot_index(s);
  if (i < UR_MAX_THREADS && (int32_t)(__atomic_load_n(&bc.seen[i], __ATOMIC_ACQUIRE) - gen) >= 0)
    return 1;
  /* The last waiter to end may have lowered it as this one began. */
  raise_flag();
  return 0;
}

void ur_calls_wait_end(void) {
  if (__atomic_sub_fetch(&bc.waiters, 1, __ATOMIC_SEQ_CST) == 0)
    __atomic_fetch_and(&ur_g.slow, ~UR_SLOW_BETWEEN_CALLS, __ATOMIC_SEQ_CST);
}

void ur_calls_note_between(void) {
  uint32_t i = slot_index(ur_tls.slot);
  if (i == UR_MAX_THREADS) return; /* a thread without a shared slot is never waited for */
  /* The flag was seen up: its waiter's generation is visible too. */
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  __atomic_store_n(&bc.seen[i], __atomic_load_n(&bc.gen, __ATOMIC_RELAXED), __ATOMIC_RELEASE);
}

void ur_calls_after_fork_child(void) {
  bc.waiters = 0;
  __atomic_fetch_and(&ur_g.slow, ~UR_SLOW_BETWEEN_CALLS, __ATOMIC_SEQ_CST);
}
