/* ur_mem_read_runs_into (memory.c) against a real child: scattered page
 * runs of one chunk, some of pages the child shares copy-on-write with this
 * process, some of pages it maps alone, one it made PROT_NONE, are read in
 * one pass (one pagemap read, one process_vm_readv for the pages it maps
 * alone): each run holds what the child holds, the page process_vm_readv
 * cannot read included (the call stops there, and it and the rest of the
 * runs come through /proc/PID/mem, which reads it), no page is bad, the pages between the runs are left as they were,
 * only the child's own pages come through process_vm_readv, and the shared
 * pages stay shared (a pin would have unshared them into the child).
 * The child is stopped and the pin gate opened for it (pin_gate.h); with
 * the gate shut, every page comes through /proc/PID/mem. Built with ASan+UBSan. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forked_holder.h"
#include "memory.h"
#include "pin_gate.h"
#include "unit_test.h"

#define PG 4096ul
#define HALF (UR_CHUNK_PAGES / 2) /* pages [0, HALF) shared, [HALF, all) the child's */
#define LOCKED (HALF + 9)
#define PM_MMAP_EXCLUSIVE (UINT64_C(1) << 56)

static uint8_t byte_at(size_t i) { return (uint8_t)(i * 13 + 1 + (i / PG >= HALF ? 5 : 0)); }

static int exclusive(int pm, const uint8_t *base, size_t first, size_t n) {
  uint64_t e[UR_CHUNK_PAGES];
  CHECK(pread(pm, e, n * 8, (off_t)(((uintptr_t)base / PG + first) * 8)) == (ssize_t)(n * 8));
  int k = 0;
  for (size_t p = 0; p < n; p++) k += (e[p] & PM_MMAP_EXCLUSIVE) != 0;
  return k;
}

int main(void) {
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
  uint8_t *raw = mmap(NULL, 2 * UR_CHUNK_SIZE, prot, flags, -1, 0);
  CHECK(raw != MAP_FAILED);
  uint8_t *base = (uint8_t *)(((uintptr_t)raw + UR_CHUNK_SIZE - 1) & ~(UR_CHUNK_SIZE - 1));
  for (size_t i = 0; i < HALF * PG; i++) base[i] = byte_at(i);
  struct holder h = start_holder(base, HALF * PG, UR_CHUNK_SIZE, byte_at, base + LOCKED * PG);
  pid_t pid = h.pid;
  struct ur_pread_mem m;
  CHECK_EQ(ur_mem_open(&m, pid, 4 * UR_CHUNK_SIZE), 0);
  CHECK(m.pagemap_fd >= 0);
  CHECK_EQ(exclusive(m.pagemap_fd, base, 0, HALF), 0);
  /* The locked page too: still mapped, only not readable. */
  CHECK_EQ(exclusive(m.pagemap_fd, base, HALF, HALF), (int)HALF);
  int err = 0;
  struct ur_chunk *ch = ur_mem_chunk(&m, (uint64_t)(uintptr_t)base, &err);
  CHECK(ch != NULL);
  /* (first page, pages): shared, shared, across the halves, the child's,
   * its locked page and the ones around it, the child's last page. */
  const size_t spans[][2] = {{0, 1},    {3, 4},           {HALF - 2, 5},
                             {HALF + 5, 1}, {LOCKED - 1, 3}, {UR_CHUNK_PAGES - 1, 1}};
  const size_t n = sizeof spans / sizeof spans[0];
  uint64_t runs[2 * (sizeof spans / sizeof spans[0])];
  size_t own = 0;
  for (size_t k = 0; k < n; k++) {
    runs[2 * k] = (uint64_t)(uintptr_t)base + spans[k][0] * PG;
    runs[2 * k + 1] = spans[k][1] * PG;
    for (size_t p = spans[k][0]; p < spans[k][0] + spans[k][1]; p++)
      own += p >= HALF && p < LOCKED;
  }
  int status;
  CHECK(kill(pid, SIGSTOP) == 0 && waitpid(pid, &status, WUNTRACED) == pid);
  for (int open_gate = 1; open_gate >= 0; open_gate--) {
    if (open_gate) ur_pin_allow(pid);
    else ur_pin_forbid(pid);
    uint64_t before = m.bytes_vm_read;
    memset(ch->data, 0xee, UR_CHUNK_SIZE);
    ur_mem_read_runs_into(&m, ch, runs, n);
    for (size_t p = 0; p < UR_CHUNK_PAGES; p++) {
      int in = 0;
      for (size_t k = 0; k < n; k++) in |= p >= spans[k][0] && p < spans[k][0] + spans[k][1];
      CHECK_EQ((int)(ch->bad[p / 64] >> (p % 64) & 1), 0);
      for (size_t i = p * PG; i < (p + 1) * PG; i += 509) {
        uint8_t want = in ? byte_at(i) : 0xee;
        CHECK_EQ(ch->data[i], want);
      }
    }
    /* The call stops at the locked page; the rest came through /proc/PID/mem. */
    CHECK_EQ(m.bytes_vm_read - before, open_gate ? own * PG : 0);
    CHECK_EQ(exclusive(m.pagemap_fd, base, 0, HALF), 0);
  }
  CHECK(kill(pid, SIGCONT) == 0);
  ur_mem_close(&m);
  end_holder(h);
  printf("ok read_runs\n");
  return 0;
}
