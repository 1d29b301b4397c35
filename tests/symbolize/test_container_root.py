"""A target in a mount namespace of its own whose root is "/" as this
process's is (unshare --mount, a container seen without pivot_root): its
paths are not this process's. With an overlay over its program's directory
mounted only there, the same path names here a file of the same inode on
another device; the symbolizer took the root's path for proof of the same
files, opened this process's, found it not the file mapped and left every
frame of it unnamed (rsync in such a container: libc's frames)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cbuild import build
from tests.support.container import in_container
from unreachable.process.mapped_file import fs_root
from unreachable.process.maps import read_maps
from unreachable.symbolize.frames import Symbolizer

LEAKER = Path(__file__).resolve().parent / "programs" / "leaker.c"
FUNCTION = "leaker_lost_block"


def test_the_symbolizer_reads_the_containers_file(tmp_path):
    with in_container(build(LEAKER), tmp_path) as (pid, exe):
        assert fs_root(pid) == f"/proc/{pid}/root"
        maps = read_maps(pid)
        m = next(m for m in maps if m.path == str(exe) and "x" in m.perms)
        pcs = [m.start + offset for offset in range(0, m.end - m.start, 16)]
        sym = Symbolizer(pid, maps, cache_dir=False, debug_dirs=[])
        assert FUNCTION in {frame.function for frame in sym.symbolize_pcs(pcs)}
        assert sym.note == ""


def test_a_scan_names_the_leaks_function(tmp_path):
    with in_container(build(LEAKER), tmp_path) as (pid, _exe):
        scan = subprocess.run(
            [sys.executable, "-m", "unreachable.cli.main", "scan", str(pid)],
            capture_output=True,
            text=True,
        )
        assert scan.returncode == 1, scan.stderr
        assert "48 bytes in 1 unreachable allocation" in scan.stdout
        assert FUNCTION in scan.stdout
        assert "files not read" not in scan.stderr


def test_this_processs_own_root_keeps_plain_paths():
    assert fs_root(os.getpid()) == ""
