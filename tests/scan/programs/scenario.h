/* Shared scaffolding for scan scenario programs.
 *
 * Each program builds its heap, drops the pointers that should leak, wipes
 * stale copies the compiler may have left (dead stack slots below SP are not
 * scanned, but registers are), prints one READY line and waits for stdin to
 * close or a command. The test then scans it and checks exact totals. */
#ifndef SCENARIO_H
#define SCENARIO_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef UR_PEER_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/* Keeps the compiler from proving a store dead or a block unused. */
#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

/* Overwrite the caller-saved registers, so that no stale pointer survives
 * in them into the caller's next call. */
__attribute__((noinline, unused)) static void clear_scratch_registers(void) {
  __asm__ volatile(
      "xor %%eax, %%eax\n xor %%ecx, %%ecx\n xor %%edx, %%edx\n"
      "xor %%esi, %%esi\n xor %%edi, %%edi\n xor %%r8d, %%r8d\n"
      "xor %%r9d, %%r9d\n xor %%r10d, %%r10d\n xor %%r11d, %%r11d\n"
      "vzeroall\n"
      :
      :
      : "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "memory");
}

/* Overwrite the stack below the caller and the caller-saved registers so no
 * stale pointer survives in them. */
__attribute__((noinline, unused)) static void wipe(void) {
  volatile char buf[32768];
  memset((char *)buf, 0, sizeof buf);
  __asm__ volatile("" : : "r"(buf) : "memory"); /* the memset is not dead */
  clear_scratch_registers();
}

/* The five blocks a program drops when its test is what the program does
 * to a scan (threads churning, memory unmapped or written meanwhile), not
 * the leaks' shape; its READY line names them with FIVE_LEAKS. */
#define FIVE_LEAKS "leak_count=5 leak_bytes=5010"
__attribute__((noinline, unused)) static void drop_five_leaks(void) {
  for (int i = 0; i < 5; i++) KEEP(malloc(1000 + (size_t)i));
}

/* glibc's start-up leaves the high half of one of libc's addresses in a
 * live frame of the main thread (a jmp_buf's padding, half overwritten): a
 * 4 GiB-aligned word every conservative scan, LeakSanitizer's included,
 * takes for a pointer. A block of tens of MiB mapped just below libc spans
 * that boundary in about one run of a hundred, and its leak is then hidden
 * for good reason. A block that would be dropped is allocated again below
 * such a boundary; the first one is kept (kept_aside), reachable. */
__attribute__((unused)) static void *volatile kept_aside;

__attribute__((unused)) static void *malloc_clear_of_4g(size_t size) {
  char *p = (char *)malloc(size);
  if (p != NULL && ((uintptr_t)p >> 32) != ((uintptr_t)(p + size - 1) >> 32)) {
    kept_aside = p;
    p = (char *)malloc(size);
  }
  return p;
}

/* READY and the line, on stdout: the test scans from then on. Called
 * through the macro below: a variadic function's prologue stores every
 * argument register in its frame, the ones no argument uses too, and those
 * hold whatever the calls before left (the shim's own pointers into the
 * heap among them), live on the stack while the scan looks; its buffers
 * start zeroed for the same reason. */
__attribute__((format(printf, 1, 2), unused)) static void ready_line(const char *fmt, ...) {
  char line[512] = {0};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
#ifdef UR_PEER_LSAN
  /* Built for bench/peer_accuracy.py: LeakSanitizer's verdict at the moment
   * a scan would be taken, then the same READY line. */
  __lsan_do_recoverable_leak_check();
  dprintf(2, "UR-LSAN-CHECKED\n");
#endif
  /* Not dprintf: glibc's mallocs a 4 KiB buffer and frees it after the
   * write, so a scan started as soon as READY arrives could see it. */
  char out[sizeof line + 8] = {0};
  int n = snprintf(out, sizeof out, "READY %s\n", line);
  if (n > 0 && write(1, out, (size_t)n < sizeof out ? (size_t)n : sizeof out - 1) < 0) _exit(99);
}

#define ready(...) (clear_scratch_registers(), ready_line(__VA_ARGS__))

/* Wait until the test closes stdin; runs no allocation. */
__attribute__((unused)) static void wait_for_test(void) {
  char c;
  while (read(0, &c, 1) > 0) {
  }
}

#endif
