"""The shim's own memory for a heap of blocks of one size: at most 16 bytes
per live allocation plus 2% of the requested bytes, whatever the size and
the number of threads allocating. Resident bytes, not time: exact enough to
assert."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cbuild import REPO_DIR, build
from tests.support.shim_memory import shim_resident_bytes

# The heap bench/shim_memory_bench.py weighs: START, then READY n=N once the
# heap is live (closing stdin after that ends it).
PROGRAM = REPO_DIR / "bench" / "programs" / "memory_shape.c"

HEAP_MIB = 64


def _shim_bytes_per_allocation(shim: Path, threads: int, size: int) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if k != "UNREACHABLE_MALLOC_OPTIONS"}
    env["LD_PRELOAD"] = str(shim)
    exe = build(PROGRAM, cflags=["-O2"])
    with subprocess.Popen(
        [str(exe), str(threads), str(size), str(HEAP_MIB)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline() == "START\n"
            base = shim_resident_bytes(proc.pid)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            ready = proc.stdout.readline()
            assert ready.startswith("READY n="), ready
            n = int(ready.split()[1].removeprefix("n="))
            return (shim_resident_bytes(proc.pid) - base) / n, n
        finally:
            proc.kill()


@pytest.mark.parametrize("threads", [1, 8])
@pytest.mark.parametrize("size", [256, 1024, 16384])
def test_shim_memory_is_at_most_16_bytes_per_allocation_and_2_percent(
    shim: Path, size: int, threads: int
) -> None:
    per_allocation, n = _shim_bytes_per_allocation(shim, threads, size)
    assert n * size >= (HEAP_MIB - 1) << 20
    assert per_allocation <= 16 + 0.02 * size, (size, threads, per_allocation)
