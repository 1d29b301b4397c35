"""find_main_arena on a real process: the arena glibc itself points at, also
when every bin is empty (where a copy of the fingerprint shifted by whole
bins used to be taken, cutting the wrong 2200 bytes out of libc's data)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cbuild import build
from unreachable.process.maps import read_maps
from unreachable.roots.glibc_arena import ARENA_SIZE, find_main_arena

PROGRAM = Path(__file__).parent / "programs" / "arena_address.c"


def test_the_arena_glibc_points_at_is_found_with_every_bin_empty():
    proc = subprocess.Popen(
        [str(build(PROGRAM))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        fields = dict(kv.split("=") for kv in proc.stdout.readline().split()[1:])
        assert fields["same"] == "1"
        arena = int(fields["main_arena"], 16)
        assert find_main_arena(proc.pid, read_maps(proc.pid)) == (arena, arena + ARENA_SIZE)
    finally:
        proc.kill()
        proc.wait()
