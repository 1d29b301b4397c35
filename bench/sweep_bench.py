"""Sweep throughput and pause length of unreachable._native (not a test).

For each configuration a target (bench/heap_target.c, run under the shim)
mallocs N blocks linked in random address order, as binary trees or (shape
"list") as one chain, the serial worst case for any marker; 90% reachable
from one global, 10% leaked; it idles with T threads (T-1 of them spinning).
Then, with the one global as the only root:

- "scan while stopped": stop(), sweep(release=session) the stopped target
  from outside as stopped mode does: the pause covers reading the memory the
  walk needs, then the target runs on ("stopped"), when that comes to 64 MiB
  at most; past that the target stays stopped for the whole sweep, read in
  place; once more without release=, the pause covering the whole sweep
  ("held");
- "fork, outside": stop(), snapshot() through the helper, release(); sweep()
  then reads the frozen child through /proc/CHILD/mem (the fallback path);
- "fork, in child": the same snapshot, but the child sweeps its own memory
  (child_start(), then the index, holds and sweep steps of sweep/child.py):
  the default path; with one marking thread, then with a team
  (--mark-threads, default as a scan picks: the CPUs, at most 4).

Sweep throughput (bytes the mark phase scanned / mark time) is reported as a
ratio of memcpy bandwidth measured in the same run (ctypes.memmove), for both
fork paths, and raw /proc/PID/mem pread bandwidth (the ceiling of any reader
of another process, so of the outside path) is shown for comparison.

Usage: python bench/sweep_bench.py [--quick] [--big]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import results  # noqa: E402
from tests.support.cbuild import build  # noqa: E402
from unreachable import _native  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402
from unreachable.capture.descriptor import (  # noqa: E402
    DescriptorHeader,
    locate_shim,
    read_descriptor_header,
)
from unreachable.process.maps import read_maps  # noqa: E402
from unreachable.shim_env import shim_environment  # noqa: E402
from unreachable.sweep.child import ChildSweeper, default_mark_threads  # noqa: E402
from unreachable.sweep.mark import direct_ranges  # noqa: E402

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
    exe: Path, nblocks: int, size: int, threads: int, shape: str, tmp: Path, huge: bool = False
) -> tuple[subprocess.Popen[str], dict[str, int]]:
    allocs_file = tmp / "allocs.bin"
    proc = subprocess.Popen(
        [str(exe), str(allocs_file), str(nblocks), str(size), str(threads), shape],
        stdout=subprocess.PIPE,
        text=True,
        env=shim_environment(os.environ, shim_path(), huge_pages=huge),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("target failed to start")
    fields = {k: int(v, 0) for k, v in (item.split("=") for item in line.split())}
    return proc, fields


def settle(pid: int) -> None:
    """Wait until the last snapshot child is gone: tearing down a copy of a
    1 GB heap takes a core for milliseconds, which a timed run must not share."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not any(
            (task / "children").read_text().split()
            for task in Path(f"/proc/{pid}/task").iterdir()
            if (task / "children").exists()
        ):
            return
        time.sleep(0.005)


@contextlib.contextmanager
def fork_snapshot(pid: int, header: DescriptorHeader) -> Iterator[_native.Session]:
    """A session holding a fresh copy-on-write snapshot, the target released."""
    settle(pid)
    with _native.Session(pid) as s:
        s.stop()
        s.snapshot(header.helper_tid, header.helper_cmd)
        s.release()
        yield s


def outside_sweep(
    mem_pid: int, descriptor: int, roots: bytes, release: _native.Session | None = None
) -> dict:
    reg = _native.read_registry(mem_pid, descriptor)
    raw = _native.sweep(
        mem_pid, reg["allocs"], roots, b"", stack_ids=reg["stack_ids"], release=release
    )
    raw["allocs"] = reg["allocs"]
    return raw


def run_config(
    exe: Path, nblocks: int, size: int, threads: int, shape: str, tmp: Path, team: int, huge: bool
) -> dict[str, float]:
    proc, f = start_target(exe, nblocks, size, threads, shape, tmp, huge)
    root = f["root"]
    roots = root.to_bytes(8, "little") + (root + 8).to_bytes(8, "little")
    pid = proc.pid
    shim = locate_shim(pid, read_maps(pid))
    header = read_descriptor_header(pid, shim.descriptor_addr)
    try:
        time.sleep(0.2)
        # Scan while stopped (median of 3): the pause covers reading what the
        # walk needs, then the target runs on, up to 64 MiB of it; past that
        # the whole sweep, in place. "held": the whole sweep, through a copy.
        direct_pauses = []
        for _ in range(3):
            with _native.Session(pid) as s:
                s.stop()
                direct = outside_sweep(pid, shim.descriptor_addr, roots, release=s)
                direct_pauses.append(s.pause_ns)
        with _native.Session(pid) as s:
            s.stop()
            outside_sweep(pid, shim.descriptor_addr, roots)
            s.release()
            held_pause_ns = s.pause_ns
        # Fork snapshot swept from outside: the pause is the clone.
        pauses = []
        for _ in range(3):
            with fork_snapshot(pid, header) as s:
                pauses.append(s.pause_ns)
                outside = outside_sweep(s.mem_pid, shim.descriptor_addr, roots)
        # Fork snapshot swept in the child (best of 3 mark times), by one
        # marking thread and by a team.
        best = {}
        for threads in sorted({1, team}):
            runs = []
            for _ in range(3):
                with fork_snapshot(pid, header) as s:
                    maps = read_maps(s.mem_pid)
                    t0 = time.perf_counter()
                    child = ChildSweeper(s, header.child_box)
                    index = child.index()
                    reply = child.sweep([(root, root + 8)], b"", [], direct_ranges(maps), threads)
                    runs.append((reply, index, time.perf_counter() - t0))
            best[threads] = min(runs, key=lambda r: r[0].mark_ms)
            got = best[threads][0]
            assert got.unreachable_count == outside["unreachable_count"]
            assert got.unreachable_count == direct["unreachable_count"]
            assert got.leaks == outside["leaks"]
        reply, index, total_s = best[1]
        team_reply = best[team][0]
        raw = pread_gbps(pid, outside["allocs"])
    finally:
        proc.kill()
        proc.wait()
    # The shim's own blocks (stdio) are leaks too with only g_root as root.
    assert reply.unreachable_count >= nblocks // 10, (reply.unreachable_count, nblocks)
    return {
        "pause_direct_ms": sorted(direct_pauses)[1] / 1e6,
        "pause_held_ms": held_pause_ns / 1e6,
        "pause_snap_ms": sorted(pauses)[1] / 1e6,
        "out_mark_ms": outside["mark_ns"] / 1e6,
        "out_gbps": outside["bytes_scanned"] / outside["mark_ns"],
        "index_ms": index.index_ms,
        "mark_ms": reply.mark_ms,
        "fold_ms": reply.fold_ms,
        "child_total_ms": total_s * 1000,
        "scanned": reply.bytes_scanned,
        "sweep_gbps": reply.bytes_scanned / (reply.mark_ms * 1e6),
        "team_mark_ms": team_reply.mark_ms,
        "team_gbps": team_reply.bytes_scanned / (team_reply.mark_ms * 1e6),
        "pread_gbps": raw,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    ap.add_argument("--big", action="store_true", help="also 10M allocations and 1 GB heaps")
    ap.add_argument(
        "--huge-pages",
        action="store_true",
        help="targets run as `unreachable-cli run --huge-pages` runs them",
    )
    ap.add_argument(
        "--mark-threads",
        type=int,
        default=default_mark_threads(),
        help="the in-child team, measured beside one thread (default: as a scan picks)",
    )
    args = ap.parse_args()
    exe = build(
        [REPO / "bench" / "heap_target.c", REPO / "bench" / "programs" / "heap_shape.c"],
        name="heap_target",
        cflags=["-O2"],
    )
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
            team, huge = args.mark_threads, args.huge_pages
            r = run_config(exe, n, size, threads, shape, Path(d), team, huge)
            r["memcpy_gbps"] = memcpy_gbps(r["scanned"])
            rows.append((n, size, threads, shape, r))
            print(f"done: {n} x {size} B {shape}, {threads} threads", file=sys.stderr, flush=True)

    hdr = (
        f"{'allocs':>10} {'size':>5} {'shape':>5} {'heap MB':>8} {'thr':>3} | "
        f"{'pause: held':>11} {'stopped':>10} {'snapshot':>9} | {'memcpy':>6} {'pread':>6} | "
        f"{'outside: mark ms':>16} {'GB/s':>5} {'x memcpy':>8} | "
        f"{'in child: index':>15} {'mark ms':>8} {'fold ms':>8} {'GB/s':>6} {'x memcpy':>8} | "
        f"{'team of':>7} {'mark ms':>8} {'GB/s':>6} {'x memcpy':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for n, size, threads, shape, r in rows:
        heap_mb = n * size / 1e6
        mc = r["memcpy_gbps"]
        print(
            f"{n:>10} {size:>5} {shape:>5} {heap_mb:>8.0f} {threads:>3} | "
            f"{r['pause_held_ms']:>8.1f} ms {r['pause_direct_ms']:>7.1f} ms "
            f"{r['pause_snap_ms']:>6.2f} ms | "
            f"{mc:>6.2f} {r['pread_gbps']:>6.2f} | "
            f"{r['out_mark_ms']:>16.1f} {r['out_gbps']:>5.2f} {r['out_gbps'] / mc:>8.2f} | "
            f"{r['index_ms']:>12.1f} ms {r['mark_ms']:>8.1f} {r['fold_ms']:>8.1f} "
            f"{r['sweep_gbps']:>6.2f} {r['sweep_gbps'] / mc:>8.2f} | "
            f"{args.mark_threads:>7} {r['team_mark_ms']:>8.1f} {r['team_gbps']:>6.2f} "
            f"{r['team_gbps'] / mc:>8.2f}"
        )


if __name__ == "__main__":
    results.run("sweep_bench", "Sweep throughput and pause by sweep path", main)
