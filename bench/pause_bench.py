"""Pause of a snapshot against heap size, threads, page size and kind (not a test).

For each configuration bench/programs/pause_target.c runs under the shim with
N blocks of SIZE bytes allocated by the main thread (glibc's brk heap) or by
all threads (glibc's per-thread arenas), T threads in all, T-1 of them
spinning. It is paused REPEAT times exactly as `unreachable-cli scan` pauses
it (stop every thread, the helper's copy-on-write clone, release) and the
median pause is printed, once with 4 KiB pages and once with the shim's
huge-page heap (`unreachable-cli run --huge-pages`, glibc.malloc.hugetlb=1:
glibc's brk heap, and the shim's helper collapses the arenas' whole 2 MiB
ranges; measured once that is done), with the share of the heap the kernel
really put on huge pages, and once as a copy snapshot on 4 KiB pages (the
memory copied while the target runs, then only the pages written since read
again while it is stopped). The baseline is the fork snapshot of the same
heap on 4 KiB pages, measured in the same run.

    python bench/pause_bench.py [--quick] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import results  # noqa: E402
from tests.support.targets import TargetFactory  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402
from unreachable.capture.stop_world import CaptureRequest  # noqa: E402
from unreachable.capture.strategies import take_snapshot  # noqa: E402
from unreachable.capture.target import open_target  # noqa: E402
from unreachable.shim_env import huge_pages_unavailable, shim_environment  # noqa: E402

PROGRAM = REPO / "bench" / "programs" / "pause_target.c"
TARGET_MS = 10.0


def smaps_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def settle_huge_pages(pid: int, quiet_s: float = 2.5, limit_s: float = 60.0) -> None:
    """Wait while the shim's helper collapses glibc's arenas onto huge pages
    (native/shim/huge_arenas.c: a few 2 MiB ranges at a time, in the
    background): until AnonHugePages stops growing for longer than the
    helper's one-second period."""
    last, since, start = -1, time.monotonic(), time.monotonic()
    while time.monotonic() - start < limit_s:
        now_kb = smaps_kb(pid, "AnonHugePages")
        if now_kb != last:
            last, since = now_kb, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)


def measure(
    factory: TargetFactory,
    n: int,
    size: int,
    threads: int,
    who: str,
    huge: bool,
    repeat: int,
    modes: tuple[str, ...] = ("fork",),
) -> tuple[list[float], float]:
    # The target factory preloads the shim itself; take only the tunable.
    tunables = shim_environment(os.environ, factory.shim, huge_pages=huge).get("GLIBC_TUNABLES")
    target = factory.start(
        PROGRAM,
        *(str(a) for a in (n, size, threads, who)),
        env={"GLIBC_TUNABLES": tunables} if tunables else None,
        cflags=["-O2", "-pthread"],
    )
    try:
        pid = target.pid
        if huge:
            settle_huge_pages(pid)
        huge_share = smaps_kb(pid, "AnonHugePages") / max(smaps_kb(pid, "Anonymous"), 1)
        medians = []
        for mode in modes:
            pauses = []
            for _ in range(repeat):
                with take_snapshot(open_target(pid), CaptureRequest(mode)) as capture:
                    if capture.snapshot != mode:
                        raise SystemExit(f"{mode} snapshot failed: {capture.snapshot_error}")
                pauses.append(capture.pause_ms)
            medians.append(statistics.median(pauses))
        return medians, huge_share
    finally:
        target.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 MB only")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if why := huge_pages_unavailable():
        print(f"note: {why}; the huge-page columns show what glibc's tunable does here")
    heaps = [(100_000, 1024)] if args.quick else [(100_000, 1024), (1_000_000, 1024)]
    configs = [(n, s, 1, "main") for n, s in heaps]
    configs += [(n, s, 8, who) for n, s in heaps for who in ("main", "all")]
    factory = TargetFactory(shim_path())
    hdr = (
        f"{'heap MB':>8} {'threads':>7} {'allocating':>10} | {'fork, 4 KiB':>11} | "
        f"{'fork, huge pages':>16} {'on THP':>6} {'x fork':>6} | "
        f"{'copy, 4 KiB':>11} {'x fork':>6} | {'<= 10 ms':>10}"
    )
    print(hdr)
    print("-" * len(hdr))
    try:
        for n, size, threads, who in configs:
            (small, copy), _ = measure(
                factory, n, size, threads, who, False, args.repeat, ("fork", "copy")
            )
            (huge,), share = measure(factory, n, size, threads, who, True, args.repeat)
            met = "/".join(name for name, ms in (("huge", huge), ("copy", copy)) if ms <= TARGET_MS)
            print(
                f"{n * size / 1e6:>8.0f} {threads:>7} {who:>10} | {small:>8.2f} ms | "
                f"{huge:>13.2f} ms {share:>6.0%} {huge / small:>6.2f} | "
                f"{copy:>8.2f} ms {copy / small:>6.2f} | {met or 'no':>10}",
                flush=True,
            )
    finally:
        factory.cleanup()
    print(f"(medians of {args.repeat}; machine load adds noise; cpus: {os.cpu_count()})")


if __name__ == "__main__":
    results.run("pause_bench", "Pause of a snapshot", main)
