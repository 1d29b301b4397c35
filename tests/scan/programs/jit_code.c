/* The only pointer to a block is the immediate of an instruction in code
 * the program generated (movabs rax, imm64 at byte 2: unaligned), as a JIT
 * keeps an inline cache's data: kept. The same bytes in a page that is not
 * code are an unaligned copy, no reference: that block leaks, and so does
 * one dropped. With "dontfork", the code is kept out of forks, as V8 keeps
 * its code space: a fork snapshot reads it from the target in its pause. */
#include <stdint.h>
#include <sys/mman.h>

#include "scenario.h"

static unsigned char *movabs(unsigned char *at, void *imm) {
  at[0] = 0x48; /* REX.W */
  at[1] = 0xB8; /* mov rax, imm64 */
  memcpy(at + 2, &imm, 8);
  at[10] = 0xC3; /* ret */
  return at;
}

int main(int argc, char **argv) {
  unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  unsigned char *data = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (code == MAP_FAILED || data == MAP_FAILED) return 1;
  if (argc > 1 && strcmp(argv[1], "dontfork") == 0 && madvise(code, 4096, MADV_DONTFORK) != 0)
    return 1;
  movabs(code + 16, malloc(48));
  if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) return 1;
  /* The generated code runs: it returns the block's address. */
  void *(*load)(void) = (void *(*)(void))(uintptr_t)(code + 16);
  KEEP(load());
  movabs(data + 16, malloc(40));
  KEEP(malloc(24));
  wipe();
  ready("leak_count=2 leak_bytes=64 code=%p", (void *)code);
  wait_for_test();
  return 0;
}
