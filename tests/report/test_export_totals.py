"""Every format a scan is written in adds up to the same totals as the JSON,
folded structures included and whatever --limit says, and a pprof profile's
mappings are the target's real mappings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.heapdump.profile_proto import decode
from unreachable.model.report import export_weights

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], capture_output=True, timeout=120)


def scan(pid: int, *args: str) -> bytes:
    res = cli("scan", str(pid), "--limit", "2", *args)
    assert res.returncode == 1, res.stderr
    return res.stdout


def maps_of(pid: int) -> list[tuple[int, int, int, str]]:
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        out.append((lo, hi, int(parts[2], 16), parts[5] if len(parts) > 5 else ""))
    return out


def test_every_format_adds_up_to_the_reports_totals(targets, tmp_path):
    # graph.c folds: a chain and a tree under their roots, a 2-cycle whose
    # members each reference the other, a self-pointing block; 5 entries.
    target = targets.start(PROGRAMS / "graph.c", options="backtrace=16")
    pid = target.pid
    report = json.loads(scan(pid, "--json"))
    count, size = report["leak_count"], report["leak_bytes"]
    assert (count, size) == (11, target.int("leak_bytes")) and len(report["leaks"]) == 2

    text = scan(pid).decode()
    assert text.splitlines()[0] == f"  {size} bytes in {count} unreachable allocations"
    lmu = scan(pid, "--format", "lmu").decode().splitlines()
    assert lmu[1].split()[1:3] == [str(count), str(size)]

    collapsed = scan(pid, "--format", "collapsed").decode().splitlines()
    # (one line: the 5 entries' stacks differ only in the pc of mk's call)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in collapsed) == size

    out = tmp_path / "leaks.pb.gz"
    scan(pid, "--format", "pprof", "-o", str(out))
    profile = decode(out.read_bytes())
    assert [sum(s.value[i] for s in profile.sample) for i in (0, 1)] == [count, size]
    # every entry, not the 2 the limit lists, each with the blocks below it:
    # the chain and the tree under their roots, the 2-cycle's members and
    # the self-pointing block on their own
    assert sorted(list(s.value) for s in profile.sample) == sorted(
        [[3, 40 + 48 + 56], [5, 5 * 132], [1, 232], [1, 232], [1, 332]]
    )

    # pprof mappings: the loader's mappings of each file, not the span of its pcs
    maps = maps_of(pid)
    strings = profile.string_table
    assert profile.mapping
    for m in profile.mapping:
        path = strings[m.filename]
        assert any(
            (lo, hi, off, p) == (m.memory_start, m.memory_limit, m.file_offset, path)
            for lo, hi, off, p in maps
        ), (path, hex(m.memory_start), hex(m.memory_limit), [x for x in maps if x[3] == path])

    # the diff of a limited JSON report: its totals are the report's
    old = tmp_path / "old.json"
    old.write_bytes(json.dumps(report).encode())
    res = cli("diff", str(old), str(old), "--all", "--format", "json")
    assert res.returncode == 0, res.stderr
    diff = json.loads(res.stdout)
    assert (diff["after"]["count"], diff["after"]["bytes"]) == (count, size)
    assert sum(r["after_bytes"] for r in diff["rows"]) == size


def entry(size: int, ref: tuple[int, int] = (0, 0), similar: tuple[int, int, int, int] = (0,) * 4):
    return {
        "size": size,
        "referenced_count": ref[0],
        "referenced_size": ref[1],
        "similar_count": similar[0],
        "similar_size": similar[1],
        "similar_referenced_count": similar[2],
        "similar_referenced_size": similar[3],
    }


def test_weights_are_the_entries_own():
    # a 2-cycle of 300-byte roots, the 50-byte block below it under one
    # member, then a 10-byte root over two 20-byte blocks: the fold counts
    # each block once, so each entry weighs its total
    leaks = [entry(300, (1, 50)), entry(300), entry(10, (2, 40))]
    w = export_weights(leaks, 6, 700)
    assert w.entries == [(2, 350), (1, 300), (3, 50)]
    assert (w.unlisted_count, w.unlisted_bytes) == (0, 0)


def test_weights_of_references_counted_twice_keep_to_the_totals():
    # each member of the cycle counting the other and the block below it
    leaks = [entry(300, (2, 350)), entry(300, (2, 350)), entry(10, (2, 40))]
    w = export_weights(leaks, 6, 700)
    assert sum(c for c, _ in w.entries) + w.unlisted_count == 6
    assert sum(b for _, b in w.entries) + w.unlisted_bytes == 700


def test_weights_of_entries_past_the_limit_are_unlisted():
    leaks = [entry(100, (1, 10), (1, 100, 1, 10))]  # two roots, one block each below
    w = export_weights(leaks, 7, 400)  # 3 more leaks of 90 bytes not listed
    assert w.entries == [(4, 220)]
    assert (w.unlisted_count, w.unlisted_bytes) == (3, 180)
