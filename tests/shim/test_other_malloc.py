"""Another object's malloc found before the shim's: a wrapper that forwards
each call to the next malloc leaves the shim fully working; an allocator
that serves the calls itself leaves it inert with one line, and a scan says
why (native/shim/other_malloc.c)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.targets import TargetFactory
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).resolve().parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
MEMUSAGE = Path("/usr/lib/x86_64-linux-gnu/libmemusage.so")


def _start_behind(targets: TargetFactory, shim: Path, first: Path, wait_helper: bool = True):
    env = {"LD_PRELOAD": f"{first}:{shim}"}
    return targets.start(
        PROGRAMS / "wrapped_leak.c", preload=False, env=env, wait_helper=wait_helper
    )


def test_a_forwarding_wrapper_in_the_executable_leaves_it_working(targets):
    """A program's own interposer: its malloc comes before every preloaded
    one, and forwards to the shim's."""
    sources = [PROGRAMS / "wrapped_leak.c", PROGRAMS / "malloc_wrapper_lib.c"]
    target = targets.start(sources, ldflags=["-ldl"])
    assert target.int("leak_count") == 2
    _check_exact(target, "fork")


def _check_exact(target, snapshot: str, header: int = 0) -> None:
    report = scan(target.pid, ScanOptions(snapshot=snapshot))
    assert (report.leak_count, report.leak_bytes) == (2, 340 + 2 * header), [
        (hex(e.address), e.size) for e in report.leaks
    ]


@pytest.mark.parametrize("snapshot", ["fork", "copy", "stopped"])
def test_a_forwarding_wrapper_ahead_of_the_shim_leaves_it_working(targets, shim, snapshot):
    lib = build(PROGRAMS / "malloc_wrapper_lib.c", shared=True, ldflags=["-ldl"])
    target = _start_behind(targets, shim, lib)
    _check_exact(target, snapshot)


@pytest.mark.skipif(not MEMUSAGE.exists(), reason="glibc's libmemusage.so is not installed")
@pytest.mark.parametrize("snapshot", ["fork", "copy"])
def test_glibcs_memusage_ahead_of_the_shim_leaves_it_working(targets, shim, snapshot):
    """libmemusage.so asks the shim for each block with a header of its
    own before it (16 bytes): the leaks are the shim's blocks, header
    included, and the program's pointers are inside them."""
    target = _start_behind(targets, shim, MEMUSAGE)
    _check_exact(target, snapshot, header=16)


def test_a_replacement_allocator_ahead_of_the_shim_leaves_it_inert(targets, shim):
    lib = build(PROGRAMS / "malloc_replacement_lib.c", shared=True)
    target = _start_behind(targets, shim, lib, wait_helper=False)
    res = subprocess.run(
        [*CLI, "scan", str(target.pid)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "its malloc is another object's" in lines[0], lines
    assert target.alive() and target.tracer() == 0
