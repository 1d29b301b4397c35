"""A target whose shim was replaced or deleted on disk after it started (an
upgrade of unreachable while services run): the scan reads the shim that is
mapped, through /proc/PID/map_files, and is exact. A scanner without the
capability that needs (the daemon's unit has none to spare) says so in one
line, rather than that the target has no shim, and never reads the symbol
table of the file that took the shim's name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_scan_cli import assert_one_line_error
from unreachable.scan import scan

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture
def own_shim(shim: Path, tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("/proc/PID/map_files needs CAP_SYS_ADMIN")
    copy = tmp_path / "lib" / shim.name
    copy.parent.mkdir()
    shutil.copy(shim, copy)
    return copy


def _start(targets, shim: Path):
    return targets.start(
        PROGRAMS / "many.c", "2000", "700", preload=False, env={"LD_PRELOAD": str(shim)}
    )


def _exact(target) -> None:
    report = scan(target.pid)
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )
    assert target.alive() and target.tracer() == 0


def test_a_deleted_shim_is_read_from_the_mapping(targets, own_shim):
    target = _start(targets, own_shim)
    own_shim.unlink()
    _exact(target)


def test_a_replaced_shim_is_read_from_the_mapping(targets, own_shim):
    target = _start(targets, own_shim)
    # What an upgrade does: a new file renamed over the old name.
    new = own_shim.with_suffix(".new")
    shutil.copy("/bin/true", new)
    os.replace(new, own_shim)
    _exact(target)


def test_without_cap_sys_admin_a_replaced_shim_is_one_clear_line(targets, own_shim):
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    target = _start(targets, own_shim)
    os.replace(shutil.copy("/bin/true", own_shim.with_suffix(".new")), own_shim)
    drop = "-sys_admin,-checkpoint_restore"
    res = subprocess.run(
        [
            "setpriv",
            f"--bounding-set={drop}",
            f"--inh-caps={drop}",
            "--",
            sys.executable,
            "-m",
            "unreachable.cli.main",
            "scan",
            str(target.pid),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_one_line_error(res, r"replaced or deleted on disk")
    assert "restart the process" in res.stderr
    assert target.alive() and target.tracer() == 0
