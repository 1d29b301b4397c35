/* ur_mem_read_live (memory.c) against a real child: while it is stopped
 * and the pin gate open for it (pin_gate.h), the pages the child maps
 * alone come through process_vm_readv, the pages it shares copy-on-write
 * with this process through /proc/PID/mem and stay shared, a page the call
 * cannot read (made PROT_NONE) through /proc/PID/mem after it; with the
 * gate shut, everything through /proc/PID/mem. Either way every span,
 * aligned or not, reads what the child holds. Built with ASan+UBSan. */
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

#define PAGES 64
#define PG 4096ul
#define LOCKED 10 /* a page of the child's own memory it makes PROT_NONE */
#define PM_MMAP_EXCLUSIVE (UINT64_C(1) << 56)

static uint8_t shared_byte(size_t i) { return (uint8_t)(i * 13 + 1); }
static uint8_t own_byte(size_t i) { return (uint8_t)(i * 7 + 3); }

static void check_span(int fd, int pm, pid_t pid, int *refused, uint8_t *base, size_t off,
                       size_t len, uint8_t (*byte)(size_t)) {
  uint8_t *buf = malloc(len);
  CHECK(buf != NULL);
  memset(buf, 0xee, len);
  size_t got = ur_mem_read_live(fd, pm, pid, refused, (uint64_t)(uintptr_t)(base + off), buf, len);
  CHECK_EQ(got, len);
  for (size_t i = 0; i < len; i++) CHECK_EQ(buf[i], byte(off + i));
  free(buf);
}

static int exclusive_pages(int pm, const uint8_t *base) {
  uint64_t e[PAGES];
  CHECK(pread(pm, e, sizeof e, (off_t)((uintptr_t)base / PG * 8)) == (ssize_t)sizeof e);
  int n = 0;
  for (int p = 0; p < PAGES; p++) n += (e[p] & PM_MMAP_EXCLUSIVE) != 0;
  return n;
}

int main(void) {
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
  uint8_t *shared = mmap(NULL, PAGES * PG, prot, flags, -1, 0);
  uint8_t *own = mmap(NULL, PAGES * PG, prot, flags, -1, 0);
  CHECK(shared != MAP_FAILED && own != MAP_FAILED);
  for (size_t i = 0; i < PAGES * PG; i++) shared[i] = shared_byte(i);
  struct holder h = start_holder(own, 0, PAGES * PG, own_byte, own + LOCKED * PG);
  pid_t pid = h.pid;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
  int fd = open(path, O_RDONLY);
  snprintf(path, sizeof path, "/proc/%d/pagemap", (int)pid);
  int pm = open(path, O_RDONLY);
  CHECK(fd >= 0 && pm >= 0);
  CHECK_EQ(exclusive_pages(pm, shared), 0);
  CHECK_EQ(exclusive_pages(pm, own), PAGES);
  int refused = 0, status;
  CHECK(kill(pid, SIGSTOP) == 0 && waitpid(pid, &status, WUNTRACED) == pid);
  ur_pin_allow(pid);
  const size_t spans[][2] = {{0, PAGES * PG},        {1, 100},
                             {PG - 3, 7},            {5 * PG + 17, 9 * PG},
                             {LOCKED * PG - 8, 16},  {0, LOCKED * PG + 1},
                             {3 * PG, 40 * PG}};
  for (int open_gate = 1; open_gate >= 0; open_gate--) {
    if (!open_gate) ur_pin_forbid(pid);
    for (size_t k = 0; k < sizeof spans / sizeof spans[0]; k++) {
      check_span(fd, pm, pid, &refused, own, spans[k][0], spans[k][1], own_byte);
      check_span(fd, pm, pid, &refused, shared, spans[k][0], spans[k][1], shared_byte);
    }
  }
  CHECK_EQ(refused, 0);
  CHECK(kill(pid, SIGCONT) == 0);
  /* Still shared: a pin would have unshared them into the child. */
  CHECK_EQ(exclusive_pages(pm, shared), 0);
  end_holder(h);
  close(fd);
  close(pm);
  printf("ok read_live\n");
  return 0;
}
