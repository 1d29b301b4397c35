"""The shim's own work (symbol lookups, the helper thread, stack bounds) must
never allocate or free behind the registry, nor touch the program's state."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.shim.support import PROGRAMS, program, run_ok
from tests.support.targets import TargetFactory
from unreachable.scan import ScanOptions, scan

DEBUG_OPTIONS = "guard fill expand_alloc free_track=10 verify_pointers record_allocs=100000"


@pytest.mark.parametrize("options", ["", "backtrace=16", DEBUG_OPTIONS])
def test_first_realloc_inside_dlerror(shim: Path, options: str) -> None:
    """glibc's pending dlerror result survives the shim's first realloc."""
    assert run_ok(program("dlerror_state.c"), shim=shim, options=options) == "OK\n"


@pytest.mark.parametrize("steps", ["fe", "fefe", "ff", "nfoe"])
def test_dlerror_results_are_not_leaks(targets: TargetFactory, steps: str) -> None:
    """dlsym failures then dlerror(): every block glibc made for them is
    free in glibc, so a scan reports nothing (dovecot's auth process)."""
    target = targets.start(PROGRAMS / "dlerror_scan.c", steps)
    report = scan(target.pid, ScanOptions())
    assert (report.leak_count, report.leak_bytes) == (0, 0), [
        (hex(e.address), e.size) for e in report.leaks
    ]


@pytest.mark.parametrize("options", ["backtrace=16", "backtrace=16 guard free_track=10"])
def test_free_in_a_signal_handler_during_the_shims_work(shim: Path, options: str) -> None:
    """Frees made while the shim unwinds (its own work) still leave the
    registry: they used to go straight to glibc and stay registered."""
    assert run_ok(program("signal_free.c"), shim=shim, options=options) == "OK\n"


def test_helper_blocks_are_registered_and_the_shims(shim: Path) -> None:
    """The helper's DTV is registered (glibc has it live), left out of
    malloc_iterate (it is the shim's), and freed through the registry when
    the helper steps aside for unshare()."""
    out = run_ok(program("helper_blocks.c"), shim=shim)
    if out.startswith("SKIP"):
        pytest.skip(f"no user namespaces here: {out.strip()}")
    assert out == "OK\n"


def test_forked_child_shows_nothing_of_the_parents_helper(targets: TargetFactory) -> None:
    """A forked child gives the parent's helper DTV back to glibc: it is on
    no list of glibc's there, and unreachable once the child's own helper
    reuses the stack (nginx's workers reported 304 bytes)."""
    target = targets.start(PROGRAMS / "fork_child_idle.c")
    child = target.int("child")
    try:
        report = scan(child, ScanOptions())
        assert (report.leak_count, report.leak_bytes) == (0, 0), [
            (hex(e.address), e.size) for e in report.leaks
        ]
    finally:
        os.kill(child, signal.SIGKILL)
