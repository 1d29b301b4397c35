#include "raw_thread.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>

#include "raw_syscall.h"

#define STACK_SIZE ((size_t)256 << 10) /* the pipeline keeps ~32 KiB of candidates on it */

#if defined(__x86_64__)
/* long ur_raw_clone(flags, stack_top, ctid, fn, arg): in the new thread, runs
 * fn(arg) on stack_top and exits the thread; in the caller, returns clone's
 * result. fn and arg ride on the new stack, the only memory both sides see
 * in their own registers after the system call. */
long ur_raw_clone(unsigned long flags, void *stack_top, int32_t *ctid, void (*fn)(void *),
                  void *arg);
__asm__(".text\n"
        ".globl ur_raw_clone\n"
        ".hidden ur_raw_clone\n"
        ".type ur_raw_clone,@function\n"
        "ur_raw_clone:\n"
        "  and $-16, %rsi\n"
        "  sub $16, %rsi\n"
        "  mov %r8, (%rsi)\n"   /* arg */
        "  mov %rcx, 8(%rsi)\n" /* fn */
        "  mov %rdx, %r10\n"    /* child_tid */
        "  xor %edx, %edx\n"    /* parent_tid */
        "  xor %r8d, %r8d\n"    /* tls: unchanged */
        "  mov $56, %eax\n"     /* SYS_clone */
        "  syscall\n"
        "  test %rax, %rax\n"
        "  jnz 1f\n"
        "  xor %ebp, %ebp\n"
        "  pop %rdi\n"
        "  pop %rax\n"
        "  call *%rax\n"
        "  mov $60, %eax\n" /* SYS_exit: this thread only */
        "  xor %edi, %edi\n"
        "  syscall\n"
        "  hlt\n"
        "1:\n"
        "  ret\n"
        ".size ur_raw_clone, .-ur_raw_clone\n");
#endif

int ur_raw_thread_start(void *ctx, void (*fn)(void *), void *arg) {
#if defined(__x86_64__)
  struct ur_raw_threads *ts = ctx;
  if (ts->n == UR_WALKER_MAX_TEAM) return -EAGAIN;
  struct ur_raw_thread *t = &ts->t[ts->n];
  long stack = ur_sys6(SYS_mmap, 0, (long)STACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (ur_sys_failed(stack)) return (int)stack;
  t->stack = (void *)stack;
  t->stack_size = STACK_SIZE;
  __atomic_store_n(&t->tid, -1, __ATOMIC_RELAXED);
  unsigned long flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                        CLONE_SYSVSEM | CLONE_CHILD_CLEARTID;
  long tid = ur_raw_clone(flags, (uint8_t *)t->stack + STACK_SIZE, &t->tid, fn, arg);
  if (ur_sys_failed(tid)) {
    ur_sys2(SYS_munmap, t->stack, STACK_SIZE);
    return (int)tid;
  }
  ts->n++;
  return 0;
#else
  (void)ctx, (void)fn, (void)arg;
  return -ENOSYS;
#endif
}

void ur_raw_thread_join(void *ctx) {
  struct ur_raw_threads *ts = ctx;
  for (unsigned i = 0; i < ts->n; i++) {
    struct ur_raw_thread *t = &ts->t[i];
    int32_t v;
    while ((v = __atomic_load_n(&t->tid, __ATOMIC_ACQUIRE)) != 0)
      ur_sys6(SYS_futex, (long)&t->tid, FUTEX_WAIT, v, 0, 0, 0);
    ur_sys2(SYS_munmap, t->stack, t->stack_size);
  }
  ts->n = 0;
}
