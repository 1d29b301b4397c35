/* A signal handler that allocates while its thread is inside malloc, free
 * or realloc: the operation the handler interrupted must stay announced in
 * the thread's slot, with the blocks it names, when the handler's own calls
 * return (a scan stopping the thread there reads the slot). A 10 kHz timer
 * interrupts a loop of malloc, free and realloc; when it lands in the shim's
 * own code (not in glibc's, whose bookkeeping a handler's call would
 * corrupt, shim or not), the handler reads the slot as the scanner does,
 * allocates (malloc, calloc, realloc, free), and reads it again. It counts the interruptions that found an operation in progress
 * and those after which the slot said something else. The loop runs until
 * argv[1] interruptions found one (or argv[2] seconds of loop passed), then
 * prints "HITS n CHANGED m". */
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

#include "shimtest.h"

static struct ur_thread_slot *mine;
static volatile long hits, changed;
static uintptr_t text_lo, text_hi; /* the shim's code */

static void on_alarm(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  uintptr_t pc = (uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
  if (pc < text_lo || pc >= text_hi) return;
  struct ur_thread_slot before = *(volatile struct ur_thread_slot *)mine;
  void *p = malloc(40);
  void *q = calloc(3, 24);
  p = realloc(p, 3000);
  free(q);
  free(p);
  struct ur_thread_slot after = *(volatile struct ur_thread_slot *)mine;
  if (before.op == UR_OP_NONE) return;
  hits++;
  if (after.op != before.op || after.in_ptr != before.in_ptr ||
      after.in_size != before.in_size || after.out_ptr != before.out_ptr ||
      after.out_size != before.out_size)
    changed++;
}

int main(int argc, char **argv) {
  long want = argc > 1 ? atol(argv[1]) : 200;
  long seconds = argc > 2 ? atol(argv[2]) : 60;
  free(malloc(1)); /* attach this thread's slot */
  mine = my_slot();
  CHECK(mine != NULL);
  shim_text(&text_lo, &text_hi);
  CHECK(text_hi > text_lo);
  every_100us(on_alarm);
  time_t end = time(NULL) + seconds;
  void *ring[64] = {0};
  for (long i = 0; hits < want && (i & 0xffff || time(NULL) < end); i++) {
    int k = (int)(i & 63);
    if (i & 64) {
      ring[k] = realloc(ring[k], (size_t)(i * 13) % 3000 + 1);
    } else {
      free(ring[k]);
      ring[k] = malloc((size_t)(i * 7) % 2000 + 1);
    }
  }
  stop_timer();
  for (int k = 0; k < 64; k++) free(ring[k]);
  printf("HITS %ld CHANGED %ld\n", hits, changed);
  return 0;
}
