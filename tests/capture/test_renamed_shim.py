"""A shim under another file name (a packager's libunreachable.so, a copy):
unreachable/capture/descriptor.py finds it through the names the target
preloads, and the scan is a shimmed one."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tests.support.renamed_shim import start_renamed
from tests.support.targets import wait_for_helper
from unreachable.capture.descriptor import runs_helper
from unreachable.capture.target import open_target, runs_without_shim
from unreachable.daemon.schedule import discover
from unreachable.daemon.targets import target_info
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
HERE = Path(__file__).parent


def test_a_renamed_shim_is_scanned_as_the_shim(targets, shim: Path, tmp_path: Path) -> None:
    """Started with a copy of the shim named libmemhooks.so, the target is
    scanned through the shim's registry, and its leaks come with their
    allocation backtraces (the heap walk of a process without the shim has
    none)."""
    renamed = tmp_path / "libmemhooks.so"
    shutil.copyfile(shim, renamed)
    target = targets.start(
        PROGRAMS / "globals.c",
        preload=False,
        env={"LD_PRELOAD": str(renamed), "UNREACHABLE_MALLOC_OPTIONS": "backtrace=16"},
        wait_helper=False,
    )
    assert wait_for_helper(target.pid)
    assert open_target(target.pid).shim.path == str(renamed)
    report = scan(target.pid, ScanOptions())
    assert report.allocations == "shim registry"
    assert report.leak_count == target.int("leak_count") > 0
    assert all(e.backtrace for e in report.leaks)


def test_a_preloaded_name_found_on_the_library_path(targets, shim: Path, tmp_path: Path) -> None:
    """LD_PRELOAD may name a file without a directory, which ld.so finds on
    the library path: the name alone is matched to the mapping."""
    shutil.copyfile(shim, tmp_path / "libunreachable.so")
    target = targets.start(
        PROGRAMS / "globals.c",
        preload=False,
        env={
            "LD_PRELOAD": "libunreachable.so",
            "LD_LIBRARY_PATH": str(tmp_path),
            "UNREACHABLE_MALLOC_OPTIONS": "backtrace=16",
        },
        wait_helper=False,
    )
    assert wait_for_helper(target.pid)
    report = scan(target.pid, ScanOptions())
    assert report.allocations == "shim registry"
    assert report.leak_count == target.int("leak_count") > 0


def test_a_renamed_shim_is_a_shim_to_the_daemon_and_the_plan(
    targets, shim: Path, tmp_path: Path
) -> None:
    """The daemon's discovery lists the target as shimmed (it read
    /proc/PID/maps for the shim's file name, and left it out), and the
    scan's plan does not take it for a process without the shim."""
    target, renamed = start_renamed(targets, shim, tmp_path, PROGRAMS / "globals.c")
    assert not runs_without_shim(target.pid)
    info = target_info(target.pid)
    assert info is not None and info.shim == str(renamed)
    found = {c.info.pid: c for c in discover([], -1)}
    assert found[target.pid].unscannable == ""


def test_a_renamed_shim_in_a_process_that_wrote_over_its_environment(
    targets, shim: Path, tmp_path: Path
) -> None:
    """A program that retitles itself (nginx, postgres) writes over the
    environment /proc/PID/environ shows, LD_PRELOAD with it: its helper
    thread's name says it runs the shim, and the file is found among the
    others it maps."""
    renamed = tmp_path / "libunreachable.so"
    shutil.copyfile(shim, renamed)
    target = targets.start(
        HERE / "programs" / "retitled.c",
        preload=False,
        env={"LD_PRELOAD": str(renamed)},
        wait_helper=False,
    )
    # The helper names itself when it first runs, which may follow READY.
    deadline = time.monotonic() + 20
    while not runs_helper(target.pid):
        assert time.monotonic() < deadline, "the shim's helper never ran"
        time.sleep(0.002)
    with open(f"/proc/{target.pid}/environ", "rb") as f:
        assert b"LD_PRELOAD" not in f.read()
    assert open_target(target.pid).shim.path == str(renamed)
    assert not runs_without_shim(target.pid)
    report = scan(target.pid, ScanOptions())
    assert report.allocations == "shim registry"
    assert report.leak_count == target.int("leak_count") > 0
