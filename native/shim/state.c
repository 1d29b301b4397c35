/*
 * The shared state (state.h): the exported descriptor, the globals and the
 * per-thread block, and the two helpers every module may call.
 */
#include "state.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

UR_EXPORT struct ur_descriptor unreachable_descriptor = {
    .magic = UR_ABI_MAGIC,
    .version = UR_ABI_VERSION,
    .size = sizeof(struct ur_descriptor),
};

struct ur_globals ur_g = {.slow = UR_SLOW_UNINIT, .debug = UR_DBG_UNINIT};
static struct ur_fork_words fork_words_shared;
struct ur_fork_words *ur_fork = &fork_words_shared;
__thread struct ur_tls ur_tls __attribute__((tls_model("initial-exec")));

uint32_t ur_self_tid(void) {
  uint32_t t = ur_tls.tid;
  if (UR_UNLIKELY(!t)) ur_tls.tid = t = (uint32_t)syscall(SYS_gettid);
  return t;
}

void ur_write_stderr(const char *buf, size_t len) {
  while (len) {
    ssize_t n = write(STDERR_FILENO, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf += n;
    len -= (size_t)n;
  }
}
