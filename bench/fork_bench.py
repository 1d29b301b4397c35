"""fork() latency under the shim against plain glibc: the parent's time in
fork(), as a forking server (Exim, PostgreSQL, Apache prefork) feels it.

Not a test: runs bench/programs/fork_latency.c with and without the shim,
alternated, R rounds per heap shape, and prints each side's median fork
time, the ratio (median of the rounds' ratios) and each side's page faults
per fork in the parent (the median round's; a count the load does not
move). The load average is printed before and after: other work on the
machine moves every time. --results writes the output to bench/RESULTS.md.

    python bench/fork_bench.py [--forks N] [--repeat R] [--shim OTHER_SHIM.so] [--results]
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

from bench import results  # noqa: E402
from tests.support.cbuild import build  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402

PROGRAM = REPO / "bench" / "programs" / "fork_latency.c"
# (live blocks, idle threads): a small daemon, a server's heap, its workers.
SHAPES = [(1000, 0), (100_000, 0), (100_000, 4)]


def fork_ns(
    exe: Path, forks: int, blocks: int, threads: int, shim: Path | None
) -> tuple[int, float]:
    """The median fork's time in ns and the page faults per fork."""
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
    fields = {x.split()[0]: x.split()[1] for x in out.splitlines() if x.strip()}
    return int(fields["fork_ns"]), float(fields["faults_per_fork"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forks", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--shim", type=Path, default=None, help="another build of the shim")
    args = ap.parse_args()
    shim = args.shim or shim_path()
    exe = build(PROGRAM)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(
        f"{'blocks':>8} {'threads':>7} {'glibc us':>9} {'shim us':>8} {'ratio':>6}"
        f" {'glibc faults':>12} {'shim faults':>11}"
    )
    for blocks, threads in SHAPES:
        plain, shimmed, ratios = [], [], []
        for _ in range(args.repeat):
            a = fork_ns(exe, args.forks, blocks, threads, None)
            b = fork_ns(exe, args.forks, blocks, threads, shim)
            plain.append(a)
            shimmed.append(b)
            ratios.append(b[0] / a[0])
        print(
            f"{blocks:>8} {threads:>7} {statistics.median(x[0] for x in plain) / 1e3:>9.1f}"
            f" {statistics.median(x[0] for x in shimmed) / 1e3:>8.1f}"
            f" {statistics.median(ratios):>5.2f}x"
            f" {statistics.median(x[1] for x in plain):>12.2f}"
            f" {statistics.median(x[1] for x in shimmed):>11.2f}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    results.run("fork_bench", "fork() under the shim (bench/fork_bench.py)", main)
