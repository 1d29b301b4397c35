/* The shim's globals, for a unit test built from a few of the shim's files
 * alone (shim.c, which defines them, is not linked). Included by one file
 * of each such program. */
#ifndef UR_TESTS_SHIM_GLOBALS_H
#define UR_TESTS_SHIM_GLOBALS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "state.h"

struct ur_globals ur_g;
static struct ur_fork_words fork_words;
struct ur_fork_words *ur_fork = &fork_words;
__thread struct ur_tls ur_tls __attribute__((tls_model("initial-exec")));
struct ur_descriptor unreachable_descriptor;
uint32_t ur_self_tid(void) { return ur_tls.tid ? ur_tls.tid : (ur_tls.tid = (uint32_t)syscall(SYS_gettid)); }
void ur_write_stderr(const char *buf, size_t len) { (void)!write(2, buf, len); }

#endif
