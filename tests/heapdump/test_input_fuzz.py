"""Fuzzing what `heapdump --file` and `diff` read: random bytes, mutated real
heap dumps and mutated JSON reports. Every input must end in exit 0, 1 or 2
with at most one line of error, no traceback, no "internal error", no hang,
and in bounded memory (the children run under RLIMIT_AS and their peak RSS
is checked).

Seeded (UNREACHABLE_FUZZ_SEED picks another seed, UNREACHABLE_FUZZ_CASES more
cases); the cases run in a few child processes, each calling the CLI's main()
once per case, so the whole test takes seconds.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.symbolize import program
from unreachable.heapdump.dump_format import write_dump

SEED = int(os.environ.get("UNREACHABLE_FUZZ_SEED", "26"))
CASES = int(os.environ.get("UNREACHABLE_FUZZ_CASES", "240"))
CHILDREN = 3
AS_LIMIT = 2 << 30  # address space of each child (the interpreter alone maps ~0.5 GiB)
RSS_LIMIT = 400 << 20  # inputs are < 1 MiB each: anything near this is a leak of bounds

# One child: run main() on each case, report exit code and stderr as JSON lines.
RUNNER = r"""
import contextlib, io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
from unreachable.cli.main import main
for argv in json.load(open(sys.argv[1])):
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException as e:
        rc, err = -1, io.StringIO(f"Traceback: escaped main(): {type(e).__name__}: {e}")
    print(json.dumps({"argv": argv, "rc": rc, "err": err.getvalue()[:2000]}), flush=True)
usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(json.dumps({"peak": max(u.ru_maxrss for u in usage) * 1024}), flush=True)
"""


def real_dump(path: Path) -> str:
    run = program.run(leaks=2)
    with open(path, "w") as f:
        write_dump([(s, 1, pcs) for s, pcs in run.all], run.maps_text, 16, "fp", f, bt_info=True)
    return path.read_text()


def real_scan_json() -> str:
    """The shape of `scan --json` (docs/report-schema.md), the fields diff reads."""
    frames = [
        {"pc": 0x5000 + i, "map": "/bin/x", "rel_pc": 0x100 + i, "function": f"f{i}",
         "offset": 4, "file": "x.c", "line": i}
        for i in range(4)
    ]  # fmt: skip
    leaks = [
        {"address": 0x1000 * i, "size": 16 * i, "similar_count": i, "similar_size": 16 * i * i,
         "backtrace": frames[i:]}
        for i in range(1, 4)
    ]  # fmt: skip
    return json.dumps({"schema": 1, "pid": 1, "leak_count": 3, "leaks": leaks}, indent=2)


def real_heapdump_json() -> str:
    frame = {"pc": 1, "map": "/bin/x", "rel_pc": 2, "function": "f", "offset": 1}
    records = [{"size": 8 * i, "num_allocations": i, "frames": [frame] * i} for i in range(5)]
    return json.dumps({"pid": 1, "records": records, "maps": ""})


def mutate_text(rng: random.Random, text: str, fifo: str) -> str:
    lines = text.splitlines(keepends=True)
    for _ in range(rng.randint(1, 4)):
        if not lines:
            lines = ["\n"]
        i = rng.randrange(len(lines))
        op = rng.randrange(12)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 2:  # a huge number where a number was
            lines[i] = "".join(
                "9" * rng.choice((21, 400, 5000)) if c.isdigit() and rng.random() < 0.1 else c
                for c in lines[i]
            )
        elif op == 3:  # flip bytes
            chars = list(lines[i])
            for _ in range(rng.randint(1, 5)):
                if chars:
                    chars[rng.randrange(len(chars))] = chr(rng.randrange(0, 256))
            lines[i] = "".join(chars)
        elif op == 4:
            lines = lines[:i]  # truncated
        elif op == 5:
            lines[i] = lines[i].rstrip("\n") + " " + "ab12 " * rng.randint(100, 3000) + "\n"
        elif op == 6:
            lines.insert(i, rng.choice(["MAPS\n", "END\n", "bt_info {\n", "z 0\n", "{\n", "[\n"]))
        elif op == 7:  # a MAPS line naming a FIFO or a device
            target = rng.choice([fifo, "/dev/zero", "/dev/urandom", "/proc/self/mem"])
            lines.insert(i, f"1000-ffffffffff r-xp 00000000 00:00 7 {target}\n")
        elif op == 8:
            lines[i] = "x" * rng.randint(1, 200_000) + "\n"
        elif op == 9:  # deep JSON
            depth = rng.choice((100, 5_000, 100_000))
            lines.insert(i, rng.choice("[{") * depth + "\n")
        elif op == 10:  # a value of another type
            lines[i] = lines[i].replace(
                '": ', rng.choice(['": "s', '": [', '": {"a": 1}, "z', '": -', '": 1e999, "q']), 1
            )
        else:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    return "".join(lines)


def random_bytes(rng: random.Random) -> bytes:
    n = rng.choice((0, 1, 10, 1000, 100_000))
    alphabet = rng.choice((bytes(range(256)), b"0123456789abcdef z\n", b'{}[]",:0\n'))
    return bytes(rng.choice(alphabet) for _ in range(n))


def build_cases(tmp: Path) -> list[list[str]]:
    rng = random.Random(SEED)
    fifo = str(tmp / "fifo")
    os.mkfifo(fifo)
    seeds = [real_dump(tmp / "real.txt"), real_scan_json(), real_heapdump_json()]
    cases: list[list[str]] = []
    for n in range(CASES):
        path = tmp / f"case{n}"
        kind = rng.random()
        if kind < 0.15:
            path.write_bytes(random_bytes(rng))
        else:
            path.write_text(mutate_text(rng, rng.choice(seeds), fifo), errors="surrogateescape")
        other = rng.choice([str(path), str(tmp / "real.txt")])
        cases.append(
            rng.choice(
                [
                    ["heapdump", "--file", str(path)],
                    ["heapdump", "--file", str(path), "--format", "collapsed"],
                    ["diff", str(path), other],
                    ["diff", other, str(path), "--format", "json"],
                ]
            )
        )
    # Files that are not regular files, and a missing one.
    for special in (fifo, "/dev/zero", str(tmp), str(tmp / "missing")):
        cases.append(["heapdump", "--file", special])
        cases.append(["diff", special, str(tmp / "real.txt")])
    return cases


def run_children(cases: list[list[str]], tmp: Path) -> tuple[list[dict], int]:
    """Each case's outcome, and the highest peak RSS of a child (its own
    count: the test process's other children are not its business)."""
    chunks = [cases[i::CHILDREN] for i in range(CHILDREN)]
    procs = []
    for i, chunk in enumerate(chunks):
        listing = tmp / f"cases-{i}.json"
        listing.write_text(json.dumps(chunk))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RUNNER, str(listing), str(AS_LIMIT)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=os.environ | {"UNREACHABLE_CACHE_DIR": str(tmp / "cache")},
            )
        )
    results, peak = [], 0
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"fuzz child died ({p.returncode}):\n{err[-3000:]}"
        lines = [json.loads(line) for line in out.splitlines()]
        peak = max(peak, lines[-1]["peak"])
        results += lines[:-1]
    return results, peak


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_fuzz_inputs_exit_cleanly_in_bounded_memory(tmp_path):
    cases = build_cases(tmp_path)
    results, peak = run_children(cases, tmp_path)
    assert len(results) == len(cases)
    bad = [
        r
        for r in results
        if r["rc"] not in (0, 1, 2)
        or "Traceback" in r["err"]
        or "internal error" in r["err"]
        or (r["rc"] == 2 and len([ln for ln in r["err"].splitlines() if "error" in ln]) != 1)
    ]
    assert not bad, json.dumps(bad[:5], indent=1)
    assert peak < RSS_LIMIT, f"a fuzz child reached {peak >> 20} MiB"
    # The fuzzing reached both outcomes: accepted and refused inputs.
    assert {0, 2} <= {r["rc"] for r in results}
