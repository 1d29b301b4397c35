/*
 * System calls without libc's wrappers, for code that runs inside the forked
 * snapshot child: a failing wrapper writes errno, which lives in the helper
 * thread's TLS at the top of its stack, a root the child is about to scan.
 * Returns the kernel's value: -errno on failure.
 */
#ifndef UR_MARK_RAW_SYSCALL_H
#define UR_MARK_RAW_SYSCALL_H

#include <sys/syscall.h>

static inline long ur_sys6(long n, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                   : "memory");
  return x0;
#else
#error "unsupported architecture"
#endif
}

#define ur_sys0(n) ur_sys6((n), 0, 0, 0, 0, 0, 0)
#define ur_sys1(n, a) ur_sys6((n), (long)(a), 0, 0, 0, 0, 0)
#define ur_sys2(n, a, b) ur_sys6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define ur_sys3(n, a, b, c) ur_sys6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define ur_sys4(n, a, b, c, d) ur_sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

static inline int ur_sys_failed(long r) { return (unsigned long)r > (unsigned long)-4096L; }

#endif
