"""Backtraces: leak info, malloc_backtrace, size filters, the toggle signal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shim.support import program, run_ok


def bt_program() -> Path:
    # -rdynamic: dladdr names the allocation sites in the program
    return program("backtraces.c", ldflags=["-rdynamic"])


@pytest.mark.parametrize("options", ["backtrace", "bt=16", "backtrace = 16 verbose"])
def test_leak_info_and_malloc_backtrace(shim: Path, options: str) -> None:
    run_ok(bt_program(), "full", shim=shim, options=options)


@pytest.mark.parametrize("options", [None, "", "verbose"])
def test_no_backtrace_option_means_no_data(shim: Path, options: str | None) -> None:
    run_ok(bt_program(), "none", shim=shim, options=options)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("bt", "777:1 1234:1 3000:1"),
        ("bt backtrace_size=1234", "777:0 1234:1 3000:0"),
        ("bt bt_sz=777", "777:1 1234:0 3000:0"),
        ("bt backtrace_min_size=1000", "777:0 1234:1 3000:1"),
        ("bt bt_max_sz=1234", "777:1 1234:1 3000:0"),
        ("bt_min_sz=1000 bt bt_max_sz=2000", "777:0 1234:1 3000:0"),
        ("backtrace_size=1234", "777:0 1234:0 3000:0"),  # a filter alone captures nothing
    ],
)
def test_size_filters(shim: Path, options: str, expected: str) -> None:
    assert run_ok(bt_program(), "sizes", shim=shim, options=options).strip() == expected


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("backtrace_enable_on_signal", "0 1 0"),  # starts off, each signal toggles
        ("bt_en_on_sig=8", "0 1 0"),
        ("bt_en_on_sig backtrace", "1 0 1"),  # with backtrace too, starts on
    ],
)
def test_enable_on_signal_toggles(shim: Path, options: str, expected: str) -> None:
    assert run_ok(bt_program(), "toggle", shim=shim, options=options).strip() == expected


def test_a_small_block_in_a_shard_leaves_it_when_its_map_came_later(shim: Path) -> None:
    """free takes a block whose chunk is small from its size map's level 0
    without looking, unless some small block may be in a shard: one with a
    backtrace is, and a map made after it for its MiB must not hide it there
    (it stayed registered after free, a false leak for every later scan)."""
    options = "backtrace=8 backtrace_min_size=100 backtrace_max_size=200"
    run_ok(bt_program(), "late_map", shim=shim, options=options)


@pytest.mark.parametrize("how", ["closefrom", "close_range", "loop"])
def test_a_program_that_closes_every_descriptor_keeps_its_own(shim: Path, how: str) -> None:
    """libunwind's address-check pipe, closed by the program and its numbers
    reused, used to take bytes from the program's pipe and put others in
    (varnishd lost its listening socket under backtrace=16)."""
    exe = program("closed_fds.c")
    assert run_ok(exe, how, shim=shim, options="backtrace=16").strip() == "ok"
    # Without the shim the program checks itself the same way.
    assert run_ok(exe, how, shim=None).strip() == "ok"


@pytest.mark.parametrize("options", ["backtrace=16", "free_track=10"])
def test_a_child_forked_while_other_threads_unwind_can_unwind(shim: Path, options: str) -> None:
    """A fork copies libunwind's locks as they are; one held by another
    thread's backtrace at that moment left the child's first backtrace
    waiting forever (a forked child's malloc under backtrace=N, or its free
    under free_track=N)."""
    assert run_ok(program("fork_unwind.c"), shim=shim, options=options) == "OK\n"


def test_threads_that_fork_at_once_while_others_unwind_all_finish(shim: Path) -> None:
    """Each forker closes the unwind gate for itself and opens only its own:
    one that opened the next forker's gate left that forker waiting forever
    for unwinding threads that no longer woke it (glibc's
    tst-malloc-fork-deadlock under backtrace=16, about one run in a hundred)."""
    assert run_ok(program("fork_gate.c"), shim=shim, options="backtrace=16") == "OK\n"


@pytest.mark.parametrize("options", ["backtrace=16", "backtrace=16 free_track=10"])
@pytest.mark.parametrize("how", ["prctl", "syscall", "inherited"])
def test_a_program_in_its_own_seccomp_sandbox_is_not_killed_by_the_unwinder(
    shim: Path, options: str, how: str
) -> None:
    """A child that installs a seccomp filter (OpenSSH's preauth child) and
    then allocates through a frame without unwind information: libunwind's
    address check called mincore(), which the filter refused, and the
    kernel killed the thread (sshd's login hung behind the helper thread).
    The filter comes through prctl, through the seccomp() system call
    (libseccomp's way), or from before the program started (set before
    exec: there libunwind's own start made its pipe and tried mincore under
    it)."""
    exe = program("seccomp_sandbox.c")
    assert run_ok(exe, how, shim=shim, options=options).strip() == "ok"
    assert run_ok(exe, how, shim=None).strip() == "ok"


@pytest.mark.parametrize("how", ["prctl", "syscall"])
def test_an_allowlist_without_sigprocmask_does_not_kill_the_unwinder(shim: Path, how: str) -> None:
    """vsftpd's pre-login child: an allowlist of its own calls without
    rt_sigprocmask, then allocations through code not unwound before.
    libunwind blocks signals around its unwind-table lookup with
    sigprocmask, and the kernel killed the process with SIGSYS."""
    exe = program("unwind_allowlist.c")
    assert run_ok(exe, how, shim=None).strip() == "ok"
    assert run_ok(exe, how, shim=shim, options="backtrace=16").strip() == "ok"


def test_a_filter_between_the_unwinders_mask_and_its_restore_leaves_no_signal_blocked(
    shim: Path,
) -> None:
    """A filter put on every thread (TSYNC) while another thread is inside
    libunwind's signal-blocking section, held there on glibc's
    dl_iterate_phdr lock: its blocking sigprocmask was made, its restoring
    one was answered without the call (the process filtered by then), and
    the thread kept every signal blocked. The section's restoring call
    follows its blocking one, and the filter waits for the section's end
    (programs/mask_across_filter.c)."""
    exe = program("mask_across_filter.c")
    assert run_ok(exe, shim=shim, options="backtrace=16").strip() == "ok"
