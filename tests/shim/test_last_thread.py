"""The helper thread never outlives the program's threads: a process ends
when and as it would without the shim (native/shim/last_thread.c)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.shim.support import program, run


@pytest.mark.parametrize(
    ("arg", "status"),
    [
        ("", -signal.SIGSYS),  # its seccomp filter killed the only thread
        ("exit", 7),  # SYS_exit(7) from the only thread
    ],
)
def test_a_process_whose_only_thread_ends_unknown_to_glibc_ends(
    shim: Path, arg: str, status: int
) -> None:
    """The thread killed by SECCOMP_RET_KILL_THREAD left the process alive
    with its leader a zombie and every signal but SIGKILL pending (sshd's
    monitor waited for ever for its preauth child)."""
    exe = program("seccomp_kill_thread.c")
    args = [arg] if arg else []
    assert run(exe, *args, shim=None, timeout=30).returncode == status
    assert run(exe, *args, shim=shim, timeout=30).returncode == status


@pytest.mark.parametrize("where", ["chroot", "fork"])
@pytest.mark.parametrize(("arg", "status"), [("kill", -signal.SIGSYS), ("exit", 7)])
def test_a_process_whose_only_thread_ends_in_a_chroot_without_proc_ends(
    shim: Path, tmp_path: Path, where: str, arg: str, status: int
) -> None:
    """The same ends in an empty chroot (sshd's preauth child: forked,
    chrooted, then sandboxed), where /proc cannot be opened: the helper
    read the leader's state and the threads left through /proc/self and
    saw nothing there, and the process stayed."""
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    exe = program("seccomp_kill_thread.c")
    args = [arg, f"{where}:{tmp_path}"]
    assert run(exe, *args, shim=None, timeout=30).returncode == status
    assert run(exe, *args, shim=shim, timeout=30).returncode == status


@pytest.mark.parametrize("arg", ["", "thread"])
def test_main_ending_with_pthread_exit_ends_the_process(shim: Path, arg: str) -> None:
    """glibc counts the helper among its threads, so main's pthread_exit
    ended only main's thread, and the process stayed for ever."""
    exe = program("main_pthread_exit.c")
    args = [arg] if arg else []
    for preload in (None, shim):
        result = run(exe, *args, shim=preload, timeout=30)
        assert (result.returncode, result.stdout) == (0, "atexit ran\n"), result.stderr
