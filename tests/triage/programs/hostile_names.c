/* A process that names itself hostilely: its comm (argv[1]) and its command
 * line may hold newlines and terminal escapes, which every report, log and
 * generated file must write as escapes. It leaks one block of 104 bytes. */
#include <sys/prctl.h>

#include "../../scan/programs/scenario.h"

__attribute__((noinline)) static void leak_one(void **out) {
  *out = malloc(104);
  memset(*out, 0x5a, 104);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  prctl(PR_SET_NAME, argv[1], 0, 0, 0);
  void *lost;
  leak_one(&lost);
  lost = NULL;
  KEEP(lost);
  wipe();
  ready("leak_count=1 leak_bytes=104");
  wait_for_test();
  return 0;
}
