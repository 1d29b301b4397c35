"""End-to-end `scan()` against allocation count: the target of 10M allocations in 5 s.

Starts tests/scan/programs/many.c under the shim with LIVE reachable and
LEAKED dropped blocks, and scans it once per size the default way (a fork
snapshot swept inside the snapshot child; from 256 MiB of writable memory a
copy snapshot swept by the scanner) and, in the same run for comparison,
with --sweep scanner (a fork snapshot swept from outside, or the copy again).
Usage: python bench/scan_bench.py [--sizes 100000,1000000,10000000] [--no-compare]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402
from tests.support.targets import TargetFactory  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402
from unreachable.scan import ScanOptions, scan  # noqa: E402

TARGET_S = 5.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--no-compare", action="store_true", help="skip the outside sweep")
    args = ap.parse_args()
    print(
        f"{'allocations':>12} {'leaked':>9} {'sweep':>7} {'pause ms':>9} {'scan s':>7}"
        f" {'vs 5 s':>7}  snapshot"
    )
    factory = TargetFactory(shim_path())
    modes = ["auto"] if args.no_compare else ["auto", "scanner"]
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            leaked = n // 10
            target = factory.start(
                ROOT / "tests/scan/programs/many.c", str(n - leaked), str(leaked)
            )
            for mode in modes:
                t0 = time.monotonic()
                report = scan(target.pid, ScanOptions(sweep=mode))  # type: ignore[arg-type]
                took = time.monotonic() - t0
                assert report.leak_count == leaked, report.leak_count
                note = f"  (fallback: {report.sweep_note})" if report.sweep_note else ""
                print(
                    f"{report.allocation_count:>12} {report.leak_count:>9} {report.sweep:>7}"
                    f" {report.pause_ms:>9.1f} {took:>7.2f} {took / TARGET_S:>6.2f}x"
                    f"  {report.snapshot}{note}",
                    flush=True,
                )
            target.stop()
    finally:
        factory.cleanup()


if __name__ == "__main__":
    results.run("scan_bench", "End to end", main)
