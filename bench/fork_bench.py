"""fork() latency under the shim against plain glibc: the parent's time in
fork(), as a forking server (Exim, PostgreSQL, Apache prefork) feels it.

Not a test: runs bench/programs/fork_latency.c with and without the shim,
alternated, R rounds per heap shape, and prints each side's median fork
time and the ratio (median of the rounds' ratios). The load average is
printed before and after: other work on the machine moves every number.

    python bench/fork_bench.py [--forks N] [--repeat R] [--shim OTHER_SHIM.so]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.cbuild import build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402

PROGRAM = REPO / "bench" / "programs" / "fork_latency.c"
# (live blocks, idle threads): a small daemon, a server's heap, its workers.
SHAPES = [(1000, 0), (100_000, 0), (100_000, 4)]


def fork_ns(exe: Path, forks: int, blocks: int, threads: int, shim: Path | None) -> int:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    out = subprocess.run(
        [str(exe), str(forks), str(blocks), str(threads)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("fork_ns "))
    return int(line.split()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forks", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--shim", type=Path, default=None, help="another build of the shim")
    args = ap.parse_args()
    shim = args.shim or shim_path()
    exe = build(PROGRAM)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'blocks':>8} {'threads':>7} {'glibc us':>9} {'shim us':>8} {'ratio':>6}")
    for blocks, threads in SHAPES:
        plain, shimmed, ratios = [], [], []
        for _ in range(args.repeat):
            a = fork_ns(exe, args.forks, blocks, threads, None)
            b = fork_ns(exe, args.forks, blocks, threads, shim)
            plain.append(a)
            shimmed.append(b)
            ratios.append(b / a)
        print(
            f"{blocks:>8} {threads:>7} {statistics.median(plain) / 1e3:>9.1f}"
            f" {statistics.median(shimmed) / 1e3:>8.1f} {statistics.median(ratios):>5.2f}x"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
