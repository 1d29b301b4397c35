"""malloc/free throughput: plain glibc vs the shim, default and backtrace=16.

Not a test: prints ops/s (best of several runs, all configurations measured in
the same run) and the slowdown of each shim configuration against glibc.

    python bench/shim_bench.py [--ops N] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.cbuild import build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402

TARGETS = {"default": 1.3, "backtrace=16": 3.0}


def measure(exe: Path, threads: int, ops: int, shim: Path | None, options: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
    env.pop("UNREACHABLE_MALLOC_OPTIONS", None)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    if options is not None:
        env["UNREACHABLE_MALLOC_OPTIONS"] = options
    out = subprocess.run(
        [str(exe), str(threads), str(ops)], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ops", type=int, default=4_000_000, help="operations per thread")
    ap.add_argument("--repeat", type=int, default=5, help="runs per configuration (best kept)")
    args = ap.parse_args()

    exe = build(REPO / "bench" / "programs" / "malloc_bench.c", cflags=["-O2"])
    shim = shim_path()
    configs: list[tuple[str, Path | None, str | None]] = [
        ("glibc", None, None),
        ("default", shim, ""),
        ("backtrace=16", shim, "backtrace=16"),
    ]
    ok = True
    for threads in (1, 2):
        best = {name: 0.0 for name, _, _ in configs}
        for _ in range(args.repeat):  # interleaved, so drift hits every configuration alike
            for name, lib, options in configs:
                best[name] = max(best[name], measure(exe, threads, args.ops, lib, options))
        print(f"threads={threads}")
        for name, _, _ in configs:
            line = f"  {name:14s} {best[name] / 1e6:8.2f} Mops/s"
            if name in TARGETS:
                ratio = best["glibc"] / best[name]
                target = TARGETS[name]
                verdict = "ok" if ratio <= target else "MISSED"
                ok &= ratio <= target
                line += f"   slowdown {ratio:5.2f}x (target <= {target}x: {verdict})"
            print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
