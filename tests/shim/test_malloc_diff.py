"""Differential test: a seeded random sequence of malloc-family calls, run
with glibc alone and under the shim, must log the same results.

programs/malloc_diff.c runs every entry point (malloc, calloc, realloc,
reallocarray, free, posix_memalign, memalign, aligned_alloc, valloc, pvalloc,
malloc_usable_size) with sizes from 0 to 64 MiB and past PTRDIFF_MAX,
alignments valid and not, realloc to 0 and from NULL, on 4 threads and in a
child forked from one of them mid-way. Its logs hold what a program can rely
on: NULL or not, errno where it is specified, alignment, calloc's zeroes,
realloc's copy, malloc_usable_size >= the size asked for. Under the shim,
malloc_iterate must also show exactly the live blocks (with their requested
sizes), and a scan must report no leak: every live pointer is in a global
array.

Seeds: 1, 2 and 3, or UNREACHABLE_DIFF_SEEDS="7 8" to replay others.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shim.support import program

OPS = 5000
THREADS = 4
SEEDS = [int(s, 0) for s in os.environ.get("UNREACHABLE_DIFF_SEEDS", "1 2 3").split()]
CLI = [sys.executable, "-m", "unreachable.cli.main"]
OPTIONS = [
    "",
    "backtrace=16",
    "free_track=20",
    "guard fill expand_alloc free_track=20 verify_pointers record_allocs=100000",
]


def start(seed: int, mode: str, logdir: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    logdir.mkdir(parents=True, exist_ok=True)
    args = [str(program("malloc_diff.c")), str(seed), str(OPS), str(THREADS), str(logdir)]
    return subprocess.Popen(
        [*args, *([mode] if mode else [])],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def ready(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    assert line.startswith("READY"), (line, proc.wait(), proc.stderr and proc.stderr.read())
    return line


def finish(proc: subprocess.Popen[bytes]) -> None:
    _, err = proc.communicate(timeout=60)  # closes stdin: the program exits
    assert proc.returncode == 0, err.decode(errors="replace")


def logs(logdir: Path) -> dict[str, list[str]]:
    return {name: (logdir / name).read_text().splitlines() for name in ("main.log", "child.log")}


def base_env() -> dict[str, str]:
    drop = ("LD_PRELOAD", "UNREACHABLE_MALLOC_OPTIONS")
    return {k: v for k, v in os.environ.items() if k not in drop}


@functools.cache
def glibc_logs(seed: int, mode: str, tmp: Path) -> dict[str, list[str]]:
    logdir = tmp / f"glibc-{seed}-{mode or 'any'}"
    proc = start(seed, mode, logdir, base_env())
    ready(proc)
    finish(proc)
    assert (logdir / "iterate.log").read_text() == "iterate unavailable\n"
    return logs(logdir)


def first_difference(want: list[str], got: list[str]) -> str:
    for i, (a, b) in enumerate(zip(want, got, strict=False)):
        if a != b:
            return f"line {i + 1}: glibc {a!r}, shim {b!r}"
    return f"glibc has {len(want)} lines, shim {len(got)}"


@pytest.fixture(scope="module")
def diff_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("malloc_diff")


def compare(shim: Path, tmp: Path, seed: int, mode: str, options: str) -> None:
    want = glibc_logs(seed, mode, tmp)
    logdir = tmp / f"shim-{seed}-{mode or 'any'}-{len(os.listdir(tmp))}"
    env = base_env()
    env["LD_PRELOAD"] = str(shim)
    env["UNREACHABLE_MALLOC_OPTIONS"] = options
    proc = start(seed, mode, logdir, env)
    try:
        live = int(ready(proc).split("live=")[1])
        res = subprocess.run(
            [*CLI, "scan", str(proc.pid), "--json"], capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr
        doc = json.loads(res.stdout)
        assert (doc["leak_count"], doc["leak_bytes"]) == (0, 0), doc["leaks"][:5]
        assert doc["allocation_count"] >= live
        finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    got = logs(logdir)
    for name in want:
        assert got[name] == want[name], f"seed {seed} {name}: " + first_difference(
            want[name], got[name]
        )
    iterate = (logdir / "iterate.log").read_text()
    assert iterate == f"iterate live {live} missing 0 wrong-size 0 extra 0\n", iterate


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_same_results_as_glibc(shim: Path, diff_tmp: Path, seed: int, options: str) -> None:
    compare(shim, diff_tmp, seed, "c11", options)


@pytest.mark.parametrize("seed", SEEDS[:1])
def test_any_aligned_alloc_alignment(shim: Path, diff_tmp: Path, seed: int) -> None:
    compare(shim, diff_tmp, seed, "", "")
