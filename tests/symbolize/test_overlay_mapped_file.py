"""A program run from an overlayfs (a container's root, a systemd test
machine's /) is mapped with the overlay's device and stat'ed with its
layer's. The mapped-file check must still find it the file mapped, without
the kernel's map_files link (which a daemon holding only CAP_SYS_PTRACE
cannot open), and still refuse any other file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cbuild import build
from unreachable._paths import shim_path
from unreachable.process import mapped_file
from unreachable.process.maps import Mapping, read_maps
from unreachable.symbolize.files import UnsafeFile, open_checked, stat_checked
from unreachable.symbolize.frames import Symbolizer

HERE = Path(__file__).resolve().parent
LEAKER = HERE / "programs" / "leaker.c"
FUNCTION = "leaker_lost_block"
# What the daemon's unit leaves a root scanner: no CAP_SYS_ADMIN and no
# CAP_CHECKPOINT_RESTORE, so no /proc/PID/map_files.
NO_MAP_FILES = ["setpriv", "--bounding-set=-sys_admin,-checkpoint_restore"]


@pytest.fixture
def overlay(tmp_path: Path) -> Iterator[Path]:
    """An overlay whose lower layer holds the leaker and the shim, its upper
    layer on a tmpfs: layers on two file systems are what make the overlay
    stat a file with its layer's device."""
    if os.geteuid() != 0:
        pytest.skip("mounting an overlay needs root")
    lower, rw, merged = (tmp_path / n for n in ("lower", "rw", "merged"))
    for d in (lower, rw, merged):
        d.mkdir()
    shutil.copy(build(LEAKER), lower / "leaker")
    shutil.copy(shim_path(), lower / "shim.so")
    mounts = [
        ["mount", "-t", "tmpfs", "tmpfs", str(rw)],
        ["mkdir", str(rw / "upper"), str(rw / "work")],
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={lower},upperdir={rw}/upper,workdir={rw}/work",
            str(merged),
        ],
    ]
    try:
        for argv in mounts:
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot mount an overlay here: {done.stderr.strip()}")
        yield merged
    finally:
        for d in (merged, rw):
            subprocess.run(["umount", "-l", str(d)], capture_output=True, check=False)


@pytest.fixture
def leaker(overlay: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = dict(os.environ, LD_PRELOAD=str(overlay / "shim.so"))
    env["UNREACHABLE_MALLOC_OPTIONS"] = "backtrace=16"
    proc = subprocess.Popen(
        [str(overlay / "leaker")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b"READY")
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)


def _exe_mapping(proc: subprocess.Popen[bytes], overlay: Path) -> Mapping:
    path = str(overlay / "leaker")
    mapping = next(m for m in read_maps(proc.pid) if m.path == path and "x" in m.perms)
    if os.stat(mapping.path).st_dev == mapping.dev:
        pytest.skip("this kernel's overlay stats a file with the device it maps it with")
    return mapping


def test_the_file_mapped_from_an_overlay_passes_every_check(leaker, overlay):
    m = _exe_mapping(leaker, overlay)
    found = mapped_file.file_for(leaker.pid, m, "")
    assert found.exact and found.path == m.path and found.mapped == (m.dev, m.inode)
    stat_checked(found.path, mapped=found.mapped)
    open_checked(found.path, mapped=found.mapped).close()


def test_another_device_with_the_same_inode_is_refused(leaker, overlay):
    m = _exe_mapping(leaker, overlay)
    with pytest.raises(UnsafeFile, match="not the file the process maps"):
        open_checked(m.path, mapped=(os.makedev(0, 1), m.inode))
    with pytest.raises(UnsafeFile, match="not the file the process maps"):
        stat_checked(m.path, mapped=(m.dev, m.inode + 1))


def test_the_symbolizer_names_a_function_of_the_overlay_file(leaker, overlay):
    maps = read_maps(leaker.pid)
    m = _exe_mapping(leaker, overlay)
    pcs = [m.start + offset for offset in range(0, m.end - m.start, 16)]
    sym = Symbolizer(leaker.pid, maps, cache_dir=False, debug_dirs=[])
    assert FUNCTION in {frame.function for frame in sym.symbolize_pcs(pcs)}


def test_a_scan_without_map_files_finds_the_target_and_its_leak(leaker, overlay):
    """The daemon's case: a root scanner bounded to CAP_SYS_PTRACE and
    CAP_DAC_READ_SEARCH found no shim and watched nothing."""
    _exe_mapping(leaker, overlay)
    found = subprocess.run(
        [
            *NO_MAP_FILES,
            sys.executable,
            "-c",
            "import sys\n"
            "from unreachable.daemon.targets import target_info\n"
            f"sys.exit(target_info({leaker.pid}) is None)",
        ],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stderr
    scan = subprocess.run(
        [*NO_MAP_FILES, sys.executable, "-m", "unreachable.cli.main", "scan", str(leaker.pid)],
        capture_output=True,
        text=True,
    )
    assert scan.returncode == 1, scan.stderr
    assert "48 bytes in 1 unreachable allocation" in scan.stdout
    assert FUNCTION in scan.stdout
