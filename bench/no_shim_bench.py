"""Scan without the shim (glibc's heap walked from a child or a copy) beside the shim's scan.

tests/scan/programs/big_heap.c allocates MIB mebibytes of SIZE-byte blocks
from the main thread (every eighth one leaked) and is started twice per
heap: without the shim, scanned both ways such a process is (the default:
a copy-on-write child made by a clone() injected into a stopped thread;
and --snapshot stopped: its writable memory copied in the pause), glibc's
heap walked in the child or the copy, and under the shim, scanned the
default way (a fork snapshot, or a copy snapshot for big heaps, swept in
the snapshot child) and stopped. Each is scanned REPEAT times; the
medians of the pause and of the whole scan are printed, with their ratio
to the shim's default scan of the same heap, measured in the same run
(the baseline). Every scan's leak count must be the program's.

    python bench/no_shim_bench.py [--heaps 100,1024] [--size 64] [--repeat 3] [--results]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402
from tests.support.targets import Target, TargetFactory  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402
from unreachable.scan import ScanOptions, scan  # noqa: E402

PROGRAM = ROOT / "tests" / "scan" / "programs" / "big_heap.c"


def measure(target: Target, options: ScanOptions, repeat: int) -> tuple[float, float, str, str]:
    """Median pause (ms) and whole scan (s), the snapshot taken and where
    the allocations came from; every scan's leak count checked."""
    pauses, totals, snapshot, allocations = [], [], "", ""
    for _ in range(repeat):
        t0 = time.monotonic()
        report = scan(target.pid, options)
        totals.append(time.monotonic() - t0)
        pauses.append(report.pause_ms)
        if report.leak_count != target.int("leak_count"):
            raise SystemExit(f"leak count {report.leak_count}, expected {target.int('leak_count')}")
        snapshot, allocations = report.snapshot, report.allocations
    return statistics.median(pauses), statistics.median(totals), snapshot, allocations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heaps", default="100,1024", help="heap sizes in MiB, comma-separated")
    ap.add_argument("--size", type=int, default=64, help="block size in bytes")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    factory = TargetFactory(shim_path())
    print(
        f"{'heap':>9} {'blocks':>10}  {'scan':<34} {'pause ms':>9} {'x shim':>7}"
        f" {'scan s':>7} {'x shim':>7}"
    )
    try:
        for mib in (int(h) for h in args.heaps.split(",")):
            program_args = (str(mib), str(args.size))
            rows = []
            for who, preload in (("shim", True), ("no shim", False)):
                target = factory.start(PROGRAM, *program_args, preload=preload, cflags=["-O2"])
                try:
                    for how, options in (
                        ("default", ScanOptions()),
                        ("stopped", ScanOptions(snapshot="stopped")),
                    ):
                        rows.append((f"{who}, {how}", *measure(target, options, args.repeat)))
                finally:
                    target.stop()
            _, base_pause, base_total, _, _ = rows[0]
            blocks = (mib << 20) // args.size
            for name, pause, total, snapshot, allocations in rows:
                label = f"{name} ({snapshot})"
                print(
                    f"{mib:>5} MiB {blocks:>10,}  {label:<34} {pause:>9.1f}"
                    f" {pause / base_pause:>6.2f}x {total:>7.2f} {total / base_total:>6.2f}x",
                    flush=True,
                )
                no_shim = name.startswith("no shim")
                assert allocations == ("glibc heap" if no_shim else "shim registry")
    finally:
        factory.cleanup()


if __name__ == "__main__":
    results.run("no_shim_bench", "Scan without the shim", main)
