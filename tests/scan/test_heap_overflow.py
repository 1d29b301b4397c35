"""A scan without the shim of a process whose heap an overflow damaged:
chunk sizes and tcache links are the target's words, so each is checked
before it is followed. The walk refuses the heap in one line (exit 2),
invents nothing, and leaves the target running untraced. The checks are
glibc_heap.c's (unit-tested on made-up heaps in tests/scanner); these are
the same refusals from a real process, through the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parent / "programs" / "heap_overflow.c"

REFUSALS = {
    "size-huge": r"chunk at 0x[0-9a-f]+ \(size 0x10000000000\) runs past",
    "size-zero": r"free chunk at 0x[0-9a-f]+: size 0x30, but the next chunk's prev_size is 0",
    "tcache-loop": r"tcache 0x[0-9a-f]+ bin 1: entry 1 \(0x[0-9a-f]+\) is not a chunk of its size",
    "tcache-stack": r"tcache 0x[0-9a-f]+ bin 1: entry 1 \(0x[0-9a-f]+\) is not a chunk of its size",
}


@pytest.mark.parametrize("damage", sorted(REFUSALS))
def test_a_damaged_heap_is_refused_in_one_line(targets, damage):
    target = targets.start(PROGRAM, damage, preload=False)
    res = subprocess.run(
        [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid)],
        capture_output=True,
        text=True,
        timeout=300,  # a safety net: every walk is bounded by the heap's size
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "glibc heap walk failed" in res.stderr
    assert re.search(REFUSALS[damage], res.stderr), res.stderr
    assert "no leaks are reported from it" in res.stderr
    assert target.alive() and target.state() in "SR" and target.tracer() == 0
