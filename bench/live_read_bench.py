"""Live reads of a target's memory: process_vm_readv against /proc/PID/mem.

A target's pages are read with process_vm_readv only while the scanner
holds every thread of it stopped (native/scanner/pin_gate.h); while it runs
they go through /proc/PID/mem. This bench reads the same private anonymous
memory of a holder process both ways (native/scanner/span_read.c, the
pause's reader, 1 and 2 threads), stopped (process_vm_readv) and running
(/proc/PID/mem), and prints the throughput of each and the ratio.

Run it under the shared lock: flock /tmp/unreachable-bench.lock python3 bench/live_read_bench.py
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import machine, write_section  # noqa: E402
from unreachable import _native  # noqa: E402

HOLDER = """
import mmap, sys
size = int(sys.argv[1])
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, size, 4096):
    m[off:off + 8] = (off | 1).to_bytes(8, "little")
import ctypes
print(ctypes.addressof(ctypes.c_char.from_buffer(m)), flush=True)
sys.stdin.read()
"""


def _read(pid: int, addr: int, size: int, threads: int, stopped: bool) -> tuple[float, int]:
    """Seconds one read of [addr, addr + size) took, and the bytes read."""
    out = bytearray(size)
    span = struct.pack("<QQ", addr, addr + size)
    session = _native.Session(pid) if stopped else None
    try:
        if session:
            session.stop()
        t0 = time.perf_counter()
        got = _native.read_spans(pid, span, out, threads)
        return time.perf_counter() - t0, got
    finally:
        if session:
            session.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--results", action="store_true", help="write bench/RESULTS.md's section")
    args = ap.parse_args()
    size = args.mib << 20
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    rows = []
    try:
        assert holder.stdout is not None
        addr = int(holder.stdout.readline())
        for threads in (1, 2):
            best = {True: float("inf"), False: float("inf")}
            for _ in range(args.runs):
                for stopped in (True, False):  # in turn: the load moves both alike
                    took, got = _read(holder.pid, addr, size, threads, stopped)
                    assert got == size, (got, size)
                    best[stopped] = min(best[stopped], took)
            vm, mem = size / best[True] / 1e9, size / best[False] / 1e9
            rows.append(
                f"| {threads} | {vm:.2f} GB/s | {mem:.2f} GB/s | {best[False] / best[True]:.2f}x |"
            )
    finally:
        holder.kill()
        holder.wait()
    table = (
        f"{args.mib} MiB of private anonymous memory, best of {args.runs} reads each,"
        " stopped and running in turn.\n\n"
        "| threads | process_vm_readv (stopped) | /proc/PID/mem (running) | time ratio |\n"
        "|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    print(f"Machine: {machine()}.\n\n{table}")
    if args.results:
        write_section("live_read", "Live reads: process_vm_readv against /proc/PID/mem", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
