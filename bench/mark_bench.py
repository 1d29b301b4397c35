"""The mark core alone: sweep throughput as a ratio of memcpy (not a test).

bench/sweep_bench.py measures the mark where it runs, in a forked snapshot
child of a real target, which adds the noise of a whole scan. This runs
native/mark's heap walker over its direct-load backend inside one C program
(bench/programs/mark_bench.c) on the same heap shapes, memcpy measured in
the same process, so two builds of the mark can be compared quickly.

Each shape is marked by one thread and by a team (--threads, default: this
machine's CPUs, at most 4) as the snapshot child marks.

--mixed marks bench/peer_lsan_bench.py's heaps of mixed block sizes
instead (bench/programs/mixed_mark_bench.c: made with glibc's malloc as
peer_heap.c makes them, one thread), printing the allocation index's
build and the mark in CPU time and what the index chose (docs/pause.md,
"The mark's lookups").

Usage: python bench/mark_bench.py [--rounds R] [--threads N] [--mixed]
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
MIXED_SOURCES = [REPO / "bench" / "programs" / "mixed_mark_bench.c", *SOURCES[2:]]
# (heap bytes, smallest block, largest block)
MIXED = [
    (520_000_000, 64, 1040),
    (1_000_000_000, 16, 1040),
    (300_000_000, 16, 256),
    (200_000_000, 16, 128),
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
    ap.add_argument("--mixed", action="store_true", help="the heaps of mixed block sizes")
    args = ap.parse_args()
    if args.mixed:
        mixed(args.rounds)
        return
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


def mixed(rounds: int) -> None:
    exe = build(MIXED_SOURCES, name="mixed_mark_bench", cflags=["-O2", f"-I{MARK}"])
    print(
        f"{'heap':>22} | {'index ms':>8} {'mark ms':>8} | {'run chunks':>10} {'pages':>7} "
        f"{'min begins':>10} {'bucket slots':>12}"
    )
    for nbytes, lo, hi in MIXED:
        out = subprocess.run(
            [str(exe), str(nbytes), str(lo), str(hi), str(rounds)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        index_ms, mark_ms, _marked, _blocks, chunks, pages, min_begins, buckets = out
        heap = f"{nbytes / 1e9:.2f} GB of {lo}-{hi} B"
        print(
            f"{heap:>22} | {float(index_ms):>8.1f} {float(mark_ms):>8.1f} | {chunks:>10} "
            f"{pages:>7} {min_begins:>10} {buckets:>12}"
        )


if __name__ == "__main__":
    results.run("mark_bench", "Mark core alone (x memcpy)", main)
