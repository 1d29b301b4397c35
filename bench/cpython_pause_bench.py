"""The pause CPython feels from auto against a fork (not a test).

Starts bench/programs/py_heap.py under the shim (PYTHONMALLOC=malloc, so
every object is a malloc block the shim records), idle or with two threads
writing reference counts all over the heap, and scans it with the CLI in
turn: auto, then --snapshot fork. Prints each scan's snapshot, pause, whole
scan time and snapshot_note (docs/pause.md, "Which snapshot auto takes").

    python bench/cpython_pause_bench.py [--objects N] [--scans K] [idle|busy ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from unreachable._paths import shim_path  # noqa: E402

PROGRAM = REPO / "bench" / "programs" / "py_heap.py"
SETTLE_S = 3.0  # after READY: the busy threads get going


def _anon_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
    return kb >> 10


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modes", nargs="*", default=["busy", "idle"])
    ap.add_argument("--objects", type=int, default=400_000)
    ap.add_argument("--scans", type=int, default=3)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONMALLOC": "malloc", "LD_PRELOAD": str(shim_path())}
    for mode in args.modes:
        p = subprocess.Popen(
            [sys.executable, str(PROGRAM), str(args.objects), mode],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert p.stdout is not None and p.stdout.readline().strip() == "READY"
            time.sleep(SETTLE_S)
            load = os.getloadavg()[0]
            print(f"{mode}: {_anon_mb(p.pid)} MB anonymous, load average {load:.1f}", flush=True)
            for _ in range(args.scans):
                for extra in ([], ["--snapshot", "fork"]):
                    t0 = time.monotonic()
                    out = subprocess.run(
                        ["unreachable-cli", "scan", str(p.pid), "--json", *extra],
                        capture_output=True,
                        text=True,
                    )
                    wall = time.monotonic() - t0
                    try:
                        doc = json.loads(out.stdout)
                    except json.JSONDecodeError:
                        print(f"  {' '.join(extra) or 'auto'}: exit {out.returncode}", out.stderr)
                        continue
                    print(
                        f"  {' '.join(extra) or 'auto':<16} {doc['snapshot']:<10}"
                        f" pause {doc['pause_ms']:6.1f} ms  scan {wall:5.1f} s"
                        f"  {doc['allocation_count']} blocks  {doc['snapshot_note']}",
                        flush=True,
                    )
        finally:
            p.kill()
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
