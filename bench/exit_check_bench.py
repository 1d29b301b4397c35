"""The cost of leak_check_at_exit on a short-lived program: its wall time from
start to exit, with no shim, with the shim, and with the shim and the check.

Not a test: prints the median and the best of R interleaved rounds for each
configuration and what the check adds. The check starts the scanner (a
Python process) in every process that exits, so its cost is mostly that
interpreter's start-up plus one scan of a small heap.

    python bench/exit_check_bench.py [--allocations N] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import results  # noqa: E402
from tests.support.cbuild import build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402

CONFIGS: dict[str, tuple[bool, str | None]] = {
    "glibc": (False, None),
    "shim": (True, None),
    "shim, backtrace": (True, "backtrace"),
    "shim, leak_check_at_exit": (True, "leak_check_at_exit"),
    "shim, leak_check_at_exit backtrace": (True, "leak_check_at_exit backtrace"),
}


def run_once(exe: Path, allocations: int, preload: bool, options: str | None) -> float:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LD_PRELOAD", "UNREACHABLE_MALLOC_OPTIONS", "UNREACHABLE_SUPPRESSIONS")
    }
    env["UNREACHABLE_CLI"] = shlex.join([sys.executable, "-m", "unreachable.cli.main"])
    if preload:
        env["LD_PRELOAD"] = str(shim_path())
    if options is not None:
        env["UNREACHABLE_MALLOC_OPTIONS"] = options
    started = time.perf_counter()
    res = subprocess.run([str(exe), str(allocations)], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if res.returncode != 0:
        raise SystemExit(f"exit {res.returncode}: {res.stderr.strip()}")
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allocations", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args()
    exe = build(REPO / "bench" / "programs" / "short_lived.c")
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(args.repeat):
        for name, (preload, options) in CONFIGS.items():
            times[name].append(run_once(exe, args.allocations, preload, options))
    base = statistics.median(times["shim"])
    print(f"short_lived.c, {args.allocations} live allocations, {args.repeat} rounds")
    print(f"{'configuration':38} {'median ms':>10} {'best ms':>9} {'vs shim':>9}")
    for name, samples in times.items():
        med = statistics.median(samples)
        print(
            f"{name:38} {med * 1000:10.1f} {min(samples) * 1000:9.1f} {(med - base) * 1000:+8.1f}"
        )


if __name__ == "__main__":
    results.run("exit_check_bench", "Leak check at exit", main)
