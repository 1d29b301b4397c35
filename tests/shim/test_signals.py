"""Allocator calls from signal handlers, and the helper thread kept out of
glibc's sight while the program has one thread."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.shim.support import program, run, run_ok

RUNS = 6  # before the fix, 2 runs in 3 hung


def test_malloc_in_a_signal_handler_does_not_hang(shim: Path) -> None:
    """glibc takes no arena lock while the process has one thread, so a
    handler's malloc cannot wait on the code it interrupted; the shim's
    helper thread made glibc lock, and 2 runs in 3 hung."""
    exe = program("signal_malloc.c")
    for _ in range(RUNS):
        result = run(exe, "2000000", shim=shim, timeout=60)
        assert (result.returncode, result.stdout) == (0, "OK\n"), result.stderr


def test_helper_work_while_the_program_allocates(shim: Path) -> None:
    """The helper's first work in glibc's allocator (malloc_stats) makes glibc
    see the threads first, and waits out the program's call in progress."""
    out = run(
        program("signal_malloc.c"),
        "2000000",
        "stats",
        shim=shim,
        options="log_allocator_stats_on_signal",
        timeout=120,
    )
    assert (out.returncode, out.stdout) == (0, "OK\n"), out.stderr
    assert "Logging allocator stats" in out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give it up")
def test_set_id_reaches_the_helper(shim: Path) -> None:
    """glibc applies set*id() to every thread only when it knows there are
    several: the helper must not keep root when the program drops it."""
    assert run_ok(program("setid_helper.c"), shim=shim) == "OK\n"
