"""bench/shim_bench.py --results: a run with --no-options keeps the
malloc_debug options table an earlier run measured, and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
BENCH = REPO / "bench" / "shim_bench.py"
KEPT = "malloc_debug options: not measured by this run (--no-options); from an earlier run"


def section(results: Path) -> str:
    mark = "<!-- shim_bench -->"
    return results.read_text().partition(mark)[2].partition(mark)[0]


def run_bench(results: Path) -> None:
    env = dict(os.environ, UNREACHABLE_BENCH_RESULTS=str(results))
    # Tiny runs: the numbers do not matter here, only what the section keeps.
    cmd = [sys.executable, str(BENCH), "--no-options", "--repeat", "1", "--ops", "2000"]
    res = subprocess.run([*cmd, "--results"], env=env, capture_output=True, text=True, timeout=300)
    # Exit 1 is a missed target (a loaded machine), not a failure of the bench.
    assert res.returncode in (0, 1) and not res.stderr, res.stdout + res.stderr


def test_no_options_keeps_the_options_table(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    shutil.copy(REPO / "bench" / "RESULTS.md", results)
    before = section(results)
    options = before[before.index("malloc_debug options, threads=1") :].partition("```")[0]
    assert "guard fill free_track verify_pointers backtrace=16" in options
    run_bench(results)
    after = section(results)
    assert "load average" in after and "before the rounds" in after
    assert after.count(KEPT) == 1, after
    assert options.strip() in after, after
    # Kept again by the next run as it was, under one such line.
    run_bench(results)
    again = section(results)
    assert again.count(KEPT) == 1 and options.strip() in again, again
    assert again.partition(KEPT)[2] == after.partition(KEPT)[2]
