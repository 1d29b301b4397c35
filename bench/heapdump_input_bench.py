"""Time and peak memory of reading a big heap dump: `heapdump --file` and `diff`.

Generates a v1.2 dump of about --mb MB that looks like a real one (backtraces
of 4-16 frames drawn from a pool of pcs inside this interpreter's own
mappings, several records per backtrace with different sizes), runs the CLI
on it in a child process and prints the child's wall time and max RSS
against the file's size.

    python bench/heapdump_input_bench.py --mb 200
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import results  # noqa: E402


def code_mappings() -> tuple[str, list[tuple[int, int]]]:
    with open("/proc/self/maps") as f:
        text = f.read()
    spans = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 6 and "x" in parts[1] and parts[5].startswith("/"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            spans.append((lo, hi))
    return text, spans


def generate(path: str, target_bytes: int, pcs: int, maps: bool, seed: int = 1) -> int:
    rng = random.Random(seed)
    maps_text, spans = code_mappings()
    pool = [rng.randrange(lo, hi) for lo, hi in spans for _ in range(pcs)]
    if not maps:
        maps_text = ""  # nothing to symbolize: the reading alone
    written = 0
    records = 0
    with open(path, "w") as f:
        head = (
            "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'bench'\n\n"
            "Total memory: 0\nAllocation records: 0\nBacktrace size: 16\n\n"
        )
        f.write(head)
        written += len(head)
        tail = "MAPS\n" + maps_text + "END\n"
        while written < target_bytes - len(tail):
            stack = " ".join(f"{pc:x}" for pc in rng.choices(pool, k=rng.randint(4, 16)))
            for _ in range(rng.randint(1, 6)):  # a site allocating several sizes
                size, num = rng.randint(1, 1 << 16), rng.randint(1, 50)
                line = f"z 0  sz {size:8d}  num    {num}  bt {stack}\n"
                f.write(line)
                written += len(line)
                records += 1
        f.write(tail)
    return records


def run(cmd: list[str]) -> tuple[float, int, int]:
    """(wall seconds, the child's max RSS in bytes, exit code); the generator's own
    memory is not counted (RUSAGE_CHILDREN), and this is the only child."""
    t0 = time.monotonic()
    env = os.environ | {"UNREACHABLE_CACHE_DIR": "off"}
    with open(os.devnull, "w") as null:
        rc = subprocess.run(cmd, stdout=null, stderr=subprocess.PIPE, env=env).returncode
    wall = time.monotonic() - t0
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--command", choices=("heapdump", "diff"), default="heapdump")
    ap.add_argument("--keep", metavar="PATH", help="write the dump here and keep it")
    ap.add_argument("--pcs", type=int, default=200, help="distinct pcs per code mapping")
    ap.add_argument("--no-maps", action="store_true", help="an empty MAPS: no symbolization")
    args = ap.parse_args()
    path = args.keep or tempfile.mktemp(suffix=".txt")
    try:
        records = generate(path, args.mb << 20, args.pcs, not args.no_maps)
        size = os.path.getsize(path)
        cli = [sys.executable, "-m", "unreachable.cli.main"]
        cmd = (
            [*cli, "heapdump", "--file", path]
            if args.command == "heapdump"
            else [*cli, "diff", path, path]
        )
        wall, peak, rc = run(cmd)
        print(
            f"{args.command}: {size / 1e6:.0f} MB, {records} records: exit {rc}, "
            f"{wall:.1f} s ({size / 1e6 / wall:.1f} MB/s), max RSS {peak / 1e6:.0f} MB "
            f"({peak / size:.2f}x the file)"
        )
    finally:
        if not args.keep:
            os.unlink(path)
    return 0


if __name__ == "__main__":
    results.run("heapdump_input_bench", "Reading a big heap dump", main)
