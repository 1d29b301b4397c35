"""Sweep throughput and pause length of unreachable._native (not a test).

For each configuration a target (bench/heap_target.c) mallocs N blocks
linked in random address order, as binary trees or (shape "list") as one
chain, the serial worst case for any marker; 90% reachable from one global,
10% leaked; it idles with T threads (T-1 of them spinning). Then:

- "scan while stopped": stop(), sweep() the stopped target, release(); the
  pause includes the whole sweep;
- "fork snapshot": stop(), snapshot() through the helper protocol, release();
  the pause is only the clone's page-table copy; sweep() reads the child
  afterwards, off-pause.

Sweep throughput (bytes the mark phase scanned / mark time) is reported as a
ratio of memcpy bandwidth measured in the same run (ctypes.memmove), and of
raw /proc/PID/mem pread bandwidth (the kernel's copy is the ceiling for any
reader of another process).

Usage: python bench/sweep_bench.py [--quick] [--big]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.cbuild import build  # noqa: E402
from unreachable import _native  # noqa: E402

MiB = 1 << 20


def memcpy_gbps(nbytes: int) -> float:
    """Best of 3 memmove passes over 256 MiB buffers, nbytes in total."""
    size = 256 * MiB
    src = ctypes.create_string_buffer(size)
    dst = ctypes.create_string_buffer(size)
    ctypes.memset(src, 1, size)
    ctypes.memset(dst, 2, size)
    best = float("inf")
    for _ in range(3):
        left = max(nbytes, size)
        t = time.perf_counter()
        while left > 0:
            n = min(left, size)
            ctypes.memmove(dst, src, n)
            left -= n
        best = min(best, time.perf_counter() - t)
    return max(nbytes, size) / best / 1e9


def pread_gbps(pid: int, allocs: bytes, limit: int = 512 * MiB) -> float:
    """Raw /proc/PID/mem bandwidth over the heap's 1 MiB chunks."""
    view = memoryview(allocs).cast("Q")
    chunks = sorted({view[i] >> 20 for i in range(0, len(view), 2)})
    chunks = chunks[: limit // MiB]
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    buf = bytearray(MiB)
    try:
        t = time.perf_counter()
        total = 0
        for c in chunks:
            try:
                total += os.preadv(fd, [buf], c << 20)
            except OSError:  # a chunk reaching past the heap's end
                pass
        dt = time.perf_counter() - t
    finally:
        os.close(fd)
    return total / dt / 1e9


def start_target(
    exe: Path, nblocks: int, size: int, threads: int, shape: str, tmp: Path
) -> tuple[subprocess.Popen[str], dict[str, int], bytes]:
    allocs_file = tmp / "allocs.bin"
    proc = subprocess.Popen(
        [str(exe), str(allocs_file), str(nblocks), str(size), str(threads), shape],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("target failed to start")
    fields = {k: int(v, 0) for k, v in (item.split("=") for item in line.split())}
    return proc, fields, allocs_file.read_bytes()


def run_config(
    exe: Path, nblocks: int, size: int, threads: int, shape: str, tmp: Path
) -> dict[str, float]:
    proc, f, allocs = start_target(exe, nblocks, size, threads, shape, tmp)
    roots = (f["root"]).to_bytes(8, "little") + (f["root"] + 8).to_bytes(8, "little")
    try:
        time.sleep(0.2)
        # Scan while stopped: the pause covers the whole sweep (median of 3).
        direct_pauses = []
        for _ in range(3):
            with _native.Session(proc.pid) as s:
                s.stop()
                direct = _native.sweep(s.mem_pid, allocs, roots, b"")
                s.release()
                direct_pauses.append(s.pause_ns)
        pause_direct = sorted(direct_pauses)[1]
        # Fork snapshot: the pause is the clone.
        pauses = []
        for _ in range(3):
            with _native.Session(proc.pid) as s:
                s.stop()
                s.snapshot(f["helper"], f["cmd"])
                s.release()
                pauses.append(s.pause_ns)
                snap = _native.sweep(s.mem_pid, allocs, roots, b"")
        assert snap["unreachable"] == direct["unreachable"]
        raw = pread_gbps(proc.pid, allocs)
    finally:
        proc.kill()
        proc.wait()
    leaked = len(direct["unreachable"]) // 4
    assert leaked == nblocks // 10, (leaked, nblocks)
    return {
        "pause_direct_ms": pause_direct / 1e6,
        "pause_snap_ms": sorted(pauses)[1] / 1e6,
        "mark_ms": snap["mark_ns"] / 1e6,
        "fold_ms": snap["fold_ns"] / 1e6,
        "scanned": snap["bytes_scanned"],
        "sweep_gbps": snap["bytes_scanned"] / snap["mark_ns"],
        "pread_gbps": raw,
        "leaks": len(snap["leaks"]) // 24,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    ap.add_argument("--big", action="store_true", help="also 10M allocations and 1 GB heaps")
    args = ap.parse_args()
    exe = build(REPO / "bench" / "heap_target.c", name="heap_target", cflags=["-O2"])
    heap_series = [(100_000, 1024)] if args.quick else [(100_000, 1024), (1_000_000, 1024)]
    count_series = [(100_000, 64)] if args.quick else [(100_000, 64), (1_000_000, 64)]
    if args.big or not args.quick:
        count_series.append((10_000_000, 64))
    configs = [(n, s, t, "tree") for n, s in heap_series for t in (1, 8)]
    configs += [(n, s, 1, "tree") for n, s in count_series if (n, s) not in heap_series]
    configs += [(n, s, 1, "list") for n, s in count_series[1:2]]

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n, size, threads, shape in configs:
            r = run_config(exe, n, size, threads, shape, Path(d))
            r["memcpy_gbps"] = memcpy_gbps(r["scanned"])
            rows.append((n, size, threads, shape, r))
            print(f"done: {n} x {size} B {shape}, {threads} threads", file=sys.stderr, flush=True)

    hdr = (
        f"{'allocs':>10} {'size':>5} {'shape':>5} {'heap MB':>8} {'thr':>3} | "
        f"{'pause: stopped scan':>19} "
        f"{'pause: snapshot':>15} {'ratio':>6} | {'mark ms':>8} {'fold ms':>8} "
        f"{'sweep GB/s':>10} {'memcpy':>7} {'x memcpy':>8} {'pread':>6} {'x pread':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    for n, size, threads, shape, r in rows:
        heap_mb = n * size / 1e6
        print(
            f"{n:>10} {size:>5} {shape:>5} {heap_mb:>8.0f} {threads:>3} | "
            f"{r['pause_direct_ms']:>16.1f} ms {r['pause_snap_ms']:>12.2f} ms "
            f"{r['pause_direct_ms'] / r['pause_snap_ms']:>5.0f}x | "
            f"{r['mark_ms']:>8.1f} {r['fold_ms']:>8.1f} {r['sweep_gbps']:>10.2f} "
            f"{r['memcpy_gbps']:>7.2f} {r['sweep_gbps'] / r['memcpy_gbps']:>8.2f} "
            f"{r['pread_gbps']:>6.2f} {r['sweep_gbps'] / r['pread_gbps']:>7.2f}"
        )


if __name__ == "__main__":
    main()
