"""Each unreachable block counts once, under one leak: roots sharing a
child, a cycle of one backtrace with a block below it and a cycle with a
tail give exact per-entry numbers in JSON, text, lmu, collapsed, pprof and
the diff of a scan, and each format's entries add up to the totals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.heapdump.profile_proto import decode
from unreachable.model.report import export_weights

PROGRAM = Path(__file__).parent / "programs" / "shared_roots.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
NODE = 32  # struct node in the program

# Allocating function -> (size, referenced_count, referenced_size,
# similar_count, similar_size, similar_referenced_count,
# similar_referenced_size) of its entry.
EXPECTED = {
    # near -> shared -> grandchild; far -> middle -> shared: the shared
    # child and its child under the nearer root, the middle under the far one
    "near_root": (NODE + 1000, 2, 2 * NODE + 200 + 300, 0, 0, 0, 0),
    "far_root": (NODE + 1100, 1, NODE + 100, 0, 0, 0, 0),
    # the twins (one backtrace: one entry) point at each other and both at
    # the child: it counts once, under the lower-addressed twin, the entry
    "twin": (NODE + 500, 1, NODE + 600, 1, NODE + 500, 0, 0),
    # head <-> member -> first -> second: the tail under the member only
    "cycle_head": (NODE + 700, 0, 0, 0, 0, 0, 0),
    "cycle_member": (NODE + 800, 2, 2 * NODE + 900 + 950, 0, 0, 0, 0),
}
TIE_CHILD = NODE + 400  # one pointer from each tie root: the lower-addressed one's


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], capture_output=True, timeout=120)


def scan(pid: int, *args: str) -> bytes:
    res = cli("scan", str(pid), *args)
    assert res.returncode == 1, res.stderr
    return res.stdout


def counts(leak: dict[str, Any]) -> tuple[int, ...]:
    names = ("size", "referenced_count", "referenced_size", "similar_count", "similar_size")
    return tuple(leak[n] for n in (*names, "similar_referenced_count", "similar_referenced_size"))


def weight(leak: dict[str, Any]) -> tuple[int, int]:
    """(blocks, bytes) an entry accounts for."""
    n = 1 + leak["similar_count"] + leak["referenced_count"] + leak["similar_referenced_count"]
    return n, leak["total_size"]


@pytest.fixture(scope="module")
def program(shim: Path):
    from tests.support.targets import TargetFactory

    factory = TargetFactory(shim)
    target = factory.start(PROGRAM, options="backtrace=16")
    yield target
    factory.cleanup()


@pytest.fixture(scope="module")
def report(program) -> dict[str, Any]:
    return json.loads(scan(program.pid, "--json", "--limit", "100"))


def by_function(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {leak["backtrace"][0]["function"]: leak for leak in report["leaks"]}


def expected_weights(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(blocks, bytes) per allocating function, as the program built them."""
    out = {f: (1 + c[1] + c[3] + c[5], c[0] + c[2] + c[4] + c[6]) for f, c in EXPECTED.items()}
    leaks = by_function(report)
    a, b = leaks["tie_root_a"], leaks["tie_root_b"]
    first, second = (a, b) if a["address"] < b["address"] else (b, a)
    for leak, below in ((first, 1), (second, 0)):
        name = leak["backtrace"][0]["function"]
        out[name] = (1 + below, leak["size"] + below * TIE_CHILD)
    return out


def test_json_entries_count_each_block_once(program, report):
    assert (report["leak_count"], report["leak_bytes"]) == (15, program.int("leak_bytes"))
    leaks = by_function(report)
    assert len(report["leaks"]) == len(leaks) == 7
    for name, want in EXPECTED.items():
        assert counts(leaks[name]) == want, name
    tie = sorted((leaks[n] for n in ("tie_root_a", "tie_root_b")), key=lambda x: x["address"])
    assert counts(tie[0])[:3] == (NODE + 1200 + 100 * (tie[0] is leaks["tie_root_b"]), 1, TIE_CHILD)
    assert counts(tie[1])[1:3] == (0, 0)
    assert {n: weight(x) for n, x in leaks.items()} == expected_weights(report)
    assert sum(weight(x)[0] for x in report["leaks"]) == report["leak_count"]
    assert sum(weight(x)[1] for x in report["leaks"]) == report["leak_bytes"]
    # the exports' weights are the entries' own, nothing left over
    w = export_weights(report["leaks"], report["leak_count"], report["leak_bytes"])
    assert w.entries == [weight(x) for x in report["leaks"]]
    assert (w.unlisted_count, w.unlisted_bytes) == (0, 0)


def test_text_and_lmu_entries_add_up(program, report):
    text = scan(program.pid, "--limit", "100").decode()
    count, size = report["leak_count"], report["leak_bytes"]
    assert text.splitlines()[0] == f"  {size} bytes in {count} unreachable allocations"
    blocks = nbytes = 0
    for line in text.splitlines():
        if m := re.fullmatch(r"  (\d+) bytes unreachable at [0-9a-f]+", line):
            blocks, nbytes = blocks + 1, nbytes + int(m[1])
        elif m := re.fullmatch(
            r"   (?:referencing|and) (\d+) (?:similar )?unreachable bytes"
            r" in (\d+) allocations?",
            line,
        ):
            blocks, nbytes = blocks + int(m[2]), nbytes + int(m[1])
    assert (blocks, nbytes) == (count, size)
    assert "   referencing 1914 unreachable bytes in 2 allocations" in text.splitlines()

    lmu = scan(program.pid, "--format", "lmu", "--limit", "100").decode().splitlines()
    assert lmu[1].split()[1:3] == [str(count), str(size)]
    fields = [list(map(int, line.split()[2:10])) for line in lmu if line.startswith("leak ")]
    assert sum(f[0] + f[2] + f[4] + f[6] for f in fields) == size
    assert sum(1 + f[1] + f[3] + f[5] for f in fields) == count


def test_collapsed_and_pprof_show_each_block_under_its_root(program, report, tmp_path):
    want = expected_weights(report)
    collapsed = scan(program.pid, "--format", "collapsed", "--limit", "1").decode().splitlines()
    got = {
        line.rsplit(" ", 1)[0].rsplit(";", 1)[1]: int(line.rsplit(" ", 1)[1]) for line in collapsed
    }
    assert got == {name: b for name, (_, b) in want.items()}

    out = tmp_path / "leaks.pb.gz"
    scan(program.pid, "--format", "pprof", "--limit", "1", "-o", str(out))
    profile = decode(out.read_bytes())
    strings = profile.string_table
    functions = {f.id: strings[f.name] for f in profile.function}
    locations = {loc.id: functions[loc.line[0].function_id] for loc in profile.location}
    samples = {locations[s.location_id[0]]: tuple(s.value) for s in profile.sample}
    assert samples == want
    assert [sum(v[i] for v in samples.values()) for i in (0, 1)] == [
        report["leak_count"],
        report["leak_bytes"],
    ]


def test_diff_of_a_limited_report_adds_up(program, report, tmp_path):
    limited = json.loads(scan(program.pid, "--json", "--limit", "3"))
    rows = {}
    for doc, name in ((limited, "three.json"), (report, "all.json")):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        res = cli("diff", str(path), str(path), "--all", "--format", "json")
        assert res.returncode == 0, res.stderr
        diff = json.loads(res.stdout)
        assert (diff["after"]["count"], diff["after"]["bytes"]) == (15, report["leak_bytes"])
        assert sum(r["after_bytes"] for r in diff["rows"]) == report["leak_bytes"]
        assert sum(r["after_count"] for r in diff["rows"]) == 15
        rows = {
            r["backtrace"][0]["function"]: (r["after_count"], r["after_bytes"])
            for r in diff["rows"]
        }
    # every entry of the full report is a row of its own weight
    assert rows == expected_weights(report)
