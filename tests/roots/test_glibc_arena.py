"""find_main_arena on a real process: the arena glibc itself points at, also
when every bin is empty (where a copy of the fingerprint shifted by whole
bins used to be taken, cutting the wrong 2200 bytes out of libc's data), and
on the glibc releases whose malloc_state differ (2.43 has no fastbins)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.glibcs import SUITES, glibc
from unreachable.allocations.glibc_libc import arena_layout
from unreachable.process.maps import read_maps
from unreachable.roots.glibc_arena import NEXT_AFTER_BINS, find_main_arena

PROGRAM = Path(__file__).parent / "programs" / "arena_address.c"


def expected_arena(exe: Path, minor: int) -> tuple[int, int, tuple[int, int] | None]:
    proc = subprocess.Popen(
        [str(exe)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, GLIBC_TUNABLES="glibc.malloc.tcache_count=0"),
    )
    try:
        assert proc.stdout is not None
        fields = dict(kv.split("=") for kv in proc.stdout.readline().split()[1:])
        assert fields["same"] == "1"
        size, next_at, _ = arena_layout(minor)
        # The unsorted bin is bin_at(1): 16 bytes below the bins.
        arena = int(fields["unsorted_bin"], 16) + 16 - (next_at - NEXT_AFTER_BINS)
        return arena, arena + size, find_main_arena(proc.pid, read_maps(proc.pid))
    finally:
        proc.kill()
        proc.wait()


def test_the_arena_glibc_points_at_is_found_with_every_bin_empty():
    minor = int(os.confstr("CS_GNU_LIBC_VERSION").split(".")[1])
    begin, end, found = expected_arena(build(PROGRAM), minor)
    assert found == (begin, end)


@pytest.mark.parametrize("suite", ["questing", "resolute"])
def test_the_arena_is_found_on_another_glibc(suite):
    """2.42's layout is the older one; 2.43's begins 0x58 bytes higher (no
    have_fastchunks, no fastbinsY), which the old layout's cut-out missed."""
    release = glibc(suite)
    cflags, ldflags = release.flags()
    minor = int(SUITES[suite].split(".")[1])
    begin, end, found = expected_arena(build(PROGRAM, cflags=cflags, ldflags=ldflags), minor)
    assert found == (begin, end)
