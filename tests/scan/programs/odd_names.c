/* A process whose /proc text is not UTF-8: a file mapped from a path with
 * bytes that are no UTF-8 (0xff 0xfe), and a thread name with them. Scans
 * read /proc/PID/maps, stat and status as text; such a process must still
 * scan, and its heap dump name the file. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include "scenario.h"

static void *g_map;

__attribute__((noinline)) static void leak_one(void **out) {
  *out = malloc(104);
  memset(*out, 0x5a, 104);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  char path[4096];
  snprintf(path, sizeof path, "%s/mapped-\xff\xfe.bin", argv[1]);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0) return 3;
  g_map = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
  if (g_map == MAP_FAILED) return 4;
  prctl(PR_SET_NAME, "odd-\xff\xfe", 0, 0, 0);
  void *lost;
  leak_one(&lost);
  lost = NULL;
  KEEP(lost);
  wipe();
  ready("leak_count=1 leak_bytes=104");
  wait_for_test();
  return 0;
}
