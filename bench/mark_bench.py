"""The mark core alone: sweep throughput as a ratio of memcpy (not a test).

bench/sweep_bench.py measures the mark where it runs, in a forked snapshot
child of a real target, which adds the noise of a whole scan. This runs
native/mark's heap walker over its direct-load backend inside one C program
(bench/programs/mark_bench.c) on the same heap shapes, memcpy measured in
the same process, so two builds of the mark can be compared quickly.

Each shape is marked by one thread and by a team (--threads, default: this
machine's CPUs, at most 4) as the snapshot child marks.

Usage: python bench/mark_bench.py [--rounds R] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import results  # noqa: E402
from tests.support.cbuild import build, native_sources  # noqa: E402

MARK = REPO / "native" / "mark"
SOURCES = [
    REPO / "bench" / "programs" / "mark_bench.c",
    REPO / "bench" / "programs" / "heap_shape.c",
    *native_sources(
        "mark",
        "heap_walker.c",
        "ref_graph.c",
        "page_index.c",
        "run_index.c",
        "alloc.c",
        "radix_sort.c",
        "alloc_index.c",
        "work_pool.c",
    ),
    *native_sources("mark_child", "mem_direct.c", "raw_thread.c"),
]
CONFIGS = [
    (100_000, 1024, "tree"),
    (20_000, 8192, "tree"),
    (1_000_000, 64, "tree"),
    (100_000, 64, "list"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="best of R per configuration")
    ap.add_argument(
        "--threads", type=int, default=min(4, len(os.sched_getaffinity(0))), help="team size"
    )
    args = ap.parse_args()
    exe = build(SOURCES, name="mark_bench", cflags=["-O2", f"-I{MARK}"])
    print(
        f"{'blocks':>9} {'size':>5} {'shape':5} {'thr':>3} | {'memcpy GB/s':>11} {'mark ms':>8} "
        f"{'mark GB/s':>9} {'x memcpy':>8}"
    )
    teams = sorted({1, max(1, args.threads)})
    for n, size, shape in CONFIGS:
        for threads in teams:
            out = subprocess.run(
                [str(exe), str(n), str(size), shape, str(args.rounds), str(threads)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            copy, mark_ms, mark, ratio, marked = out
            assert int(marked) == n - n // 10, (marked, n)
            print(
                f"{n:>9} {size:>5} {shape:5} {threads:>3} | {float(copy):>11.2f} "
                f"{float(mark_ms):>8.1f} {float(mark):>9.2f} {float(ratio):>8.2f}"
            )


if __name__ == "__main__":
    results.run("mark_bench", "Mark core alone (x memcpy)", main)
