/* A process that can no longer see /proc, as privilege-separated daemons
 * (dovecot's anvil) are: "chroot DIR" chroots into DIR, "unmount" enters a
 * mount namespace of its own and unmounts /proc there. One block leaks.
 * With "closeall" it then closes every descriptor past stderr, as daemons
 * do, the shim's too. "forkchroot DIR": a child forked before chroots
 * into DIR at once, before its first allocation, as lldpd's privilege-
 * separated child does: its own helper then starts where /proc is not. The
 * child prints READY (child=its pid), and has the same leak. */
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "../../scan/programs/scenario.h"

void *g_kept, *g_child_kept;

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  g_kept = malloc(300);
  KEEP(malloc(4444));
  int child = 0;
  if (strcmp(argv[1], "forkchroot") == 0) {
    pid_t pid = fork();
    if (pid < 0) return 6;
    if (pid > 0) {
      int status;
      return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : 7;
    }
    if (argc < 3 || chroot(argv[2]) != 0 || chdir("/") != 0) return 3;
    g_child_kept = malloc(64); /* the child's first allocation: its helper starts */
    child = (int)getpid();
  } else if (strcmp(argv[1], "chroot") == 0) {
    if (argc < 3 || chroot(argv[2]) != 0 || chdir("/") != 0) return 3;
  } else if (strcmp(argv[1], "unmount") == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        umount2("/proc", MNT_DETACH) != 0)
      return 4;
  } else {
    return 2;
  }
  if (access("/proc/self/maps", F_OK) == 0) return 5;
  if (argc > 3 && strcmp(argv[3], "closeall") == 0)
    for (int fd = 3; fd < 1024; fd++) close(fd);
  wipe();
  ready("leak_count=1 leak_bytes=4444 child=%d", child);
  wait_for_test();
  return 0;
}
