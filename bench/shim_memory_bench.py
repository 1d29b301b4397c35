"""The shim's own memory against the heap it registers: blocks of 16 B to
64 KiB, 1 and 8 threads, 64 MiB of heap each (bench/programs/memory_shape.c).

Not a test. The shim's memory is the resident size of the pieces of address
space it lists in its descriptor (every byte it keeps lies in them), read
from /proc/PID/smaps: after start-up (the baseline), with the heap live,
and after the program freed it all and called malloc_trim(0) (what the shim
keeps once glibc has given the heap back: the helper thread gives the size
maps' pages back within seconds, native/shim/give_back.c). Prints a table and, with
--results, writes it to bench/RESULTS.md (the README quotes it).

    python bench/shim_memory_bench.py [--heap-mib N] [--results]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.results import write_section  # noqa: E402
from tests.support.cbuild import build  # noqa: E402
from tests.support.shim_memory import shim_resident_bytes  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402

SIZES = [16, 64, 256, 1024, 4096, 16384, 65536]
THREADS = [1, 8]
GIVE_BACK_WAIT = 8.0  # seconds
SETTLED = 256 << 10  # bytes over the baseline


def measure(exe: Path, shim: Path, threads: int, size: int, heap_mib: int) -> dict[str, float]:
    env = dict(os.environ, LD_PRELOAD=str(shim))
    env.pop("UNREACHABLE_MALLOC_OPTIONS", None)
    proc = subprocess.Popen(
        [str(exe), str(threads), str(size), str(heap_mib)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:

        def step(expect: str) -> str:
            line = proc.stdout.readline()
            if not line.startswith(expect):
                raise RuntimeError(f"memory_shape said {line!r}, expected {expect}")
            return line

        step("START")
        base = shim_resident_bytes(proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        ready = dict(kv.split("=") for kv in step("READY").split()[1:])
        live = shim_resident_bytes(proc.pid) - base
        proc.stdin.write("free\n")
        proc.stdin.flush()
        step("FREED")
        # The helper gives the maps' pages back within a few of its 2 s looks.
        kept = shim_resident_bytes(proc.pid) - base
        deadline = time.monotonic() + GIVE_BACK_WAIT
        while kept > SETTLED and time.monotonic() < deadline:
            time.sleep(0.25)
            kept = min(kept, shim_resident_bytes(proc.pid) - base)
    finally:
        proc.kill()
        proc.wait()
    n, heap = int(ready["n"]), int(ready["bytes"])
    return {
        "n": n,
        "per_alloc": live / n,
        "pct_heap": 100 * live / heap,
        "kept_kib": kept / 1024,
    }


def table(rows: list[tuple[int, int, dict[str, float]]], heap_mib: int) -> str:
    out = [
        f"Shim memory, default options, {heap_mib} MiB of heap in blocks of one size "
        "(`python bench/shim_memory_bench.py`): resident bytes of the shim's own "
        "memory over its start-up baseline, per live allocation and as % of the "
        "requested bytes; and what it still holds after the program freed "
        f"everything and called malloc_trim(0) (the least seen within {GIVE_BACK_WAIT:.0f} s).",
        "",
        "| block size | threads | allocations | shim bytes / allocation | % of heap "
        "| kept after free |",
        "|---|---|---|---|---|---|",
    ]
    for size, threads, r in rows:
        out.append(
            f"| {size:,} B | {threads} | {r['n']:,} | {r['per_alloc']:.1f} "
            f"| {r['pct_heap']:.2f}% | {r['kept_kib']:,.0f} KiB |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--heap-mib", type=int, default=64, help="heap per configuration")
    ap.add_argument("--results", action="store_true", help="write bench/RESULTS.md")
    ap.add_argument("--shim", type=Path, default=None, help="another build of the shim")
    args = ap.parse_args()
    exe = build(REPO / "bench" / "programs" / "memory_shape.c", cflags=["-O2"])
    shim = args.shim or shim_path()
    rows = [
        (size, threads, measure(exe, shim, threads, size, args.heap_mib))
        for threads in THREADS
        for size in SIZES
    ]
    text = table(rows, args.heap_mib)
    print(text, end="")
    if args.results:
        write_section("shim_memory_bench", "Shim memory", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
