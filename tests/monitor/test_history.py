"""History in a real SQLite file, growth over it, and `unreachable-cli history`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from unreachable.daemon.growth import detect_growth
from unreachable.daemon.history import UNATTRIBUTED, History, site_signature, sites_of_report
from unreachable.daemon.matching import ProcessInfo

FRAMES_A = [
    {
        "pc": 1,
        "map": "/usr/bin/app",
        "rel_pc": 0x1234,
        "function": "make_thing",
        "offset": 4,
        "file": "",
        "line": 0,
    },
    {
        "pc": 2,
        "map": "/usr/bin/app",
        "rel_pc": 0x2000,
        "function": "main",
        "offset": 9,
        "file": "",
        "line": 0,
    },
]
FRAMES_B = [
    {
        "pc": 3,
        "map": "/usr/lib/libx.so",
        "rel_pc": 0x10,
        "function": "",
        "offset": 0,
        "file": "",
        "line": 0,
    }
]


def leak(frames, size, similar=0, similar_size=0):
    return {
        "address": 0x1000,
        "size": size,
        "referenced_count": 0,
        "referenced_size": 0,
        "similar_count": similar,
        "similar_size": similar_size,
        "similar_referenced_count": 0,
        "similar_referenced_size": 0,
        "total_size": size + similar_size,
        "backtrace": frames,
    }


def report(a_bytes: int, b_bytes: int = 0, plain: int = 0) -> dict:
    leaks = []
    if a_bytes:
        n = a_bytes // 100
        leaks.append(leak(FRAMES_A, 100, n - 1, a_bytes - 100))
    if b_bytes:
        leaks.append(leak(FRAMES_B, b_bytes))
    total = a_bytes + b_bytes + plain
    count = a_bytes // 100 + (1 if b_bytes else 0) + (1 if plain else 0)
    return {
        "pid": 10,
        "leak_count": count,
        "leak_bytes": total,
        "allocation_count": count + 5,
        "allocation_bytes": total + 500,
        "pause_ms": 0.4,
        "scan_ms": 3.0,
        "leaks": leaks,
    }


def test_signature_depends_on_map_and_rel_pc_only():
    renamed = [dict(f, function="other", pc=99) for f in FRAMES_A]
    assert site_signature(FRAMES_A) == site_signature(renamed)
    moved = [dict(FRAMES_A[0], rel_pc=0x1235), FRAMES_A[1]]
    assert site_signature(FRAMES_A) != site_signature(moved)


def test_sites_of_report_folds_similar_leaks_and_keeps_the_rest_unattributed():
    sites = sites_of_report(report(1000, 300, plain=50))
    a, b = site_signature(FRAMES_A), site_signature(FRAMES_B)
    assert (sites[a].bytes, sites[a].count) == (1000, 10)
    assert (sites[b].bytes, sites[b].count) == (300, 1)
    assert (sites[UNATTRIBUTED].bytes, sites[UNATTRIBUTED].count) == (50, 1)


@pytest.fixture
def db(tmp_path):
    h = History(str(tmp_path / "state" / "history.sqlite"))
    yield h
    h.close()


def process(pid=10, start=500, unit="app.service", name="app", command="/usr/bin/app -x"):
    return ProcessInfo(pid, start, 1, name, name, command, f"/system.slice/{unit}", unit)


def record(h: History, rep: dict, when: float, *, pid=10, start=500, unit="app.service") -> int:
    return h.record_scan(process(pid, start, unit), trigger="scheduled", report=rep, when=when)


def test_file_is_created_for_the_group_to_read(tmp_path, db):
    mode = stat.S_IMODE(os.stat(db.path).st_mode)
    assert mode == 0o640


def test_series_and_growth(db):
    a, b = site_signature(FRAMES_A), site_signature(FRAMES_B)
    record(db, report(1000, 300), 1000.0)
    record(db, report(2000, 300), 1900.0)
    failed = process(10, 500, "app.service", command="app")
    db.record_failure(failed, trigger="scheduled", error="boom", when=2000.0)
    record(db, report(3000, 0), 2800.0)
    record(db, report(9999), 2900.0, start=501)  # the pid reused: another process
    ids, series = db.site_series(10, 500, 3)
    assert len(ids) == 3  # the failure is not a sample
    assert [s.bytes for s in series[a]] == [1000, 2000, 3000]
    assert [s.bytes for s in series[b]] == [300, 300, 0]
    growth = detect_growth(series, scans=3, bytes_per_hour=0)
    assert [g.site for g in growth] == [a]
    g = growth[0]
    assert (g.first_bytes, g.bytes, g.count, g.scans, g.seconds) == (1000, 3000, 30, 3, 1800.0)
    assert g.bytes_per_hour == pytest.approx(4000.0)
    assert detect_growth(series, scans=3, bytes_per_hour=4000.0) == []
    assert detect_growth(series, scans=4, bytes_per_hour=0) == []  # not enough scans yet
    assert db.frames(a)[0]["function"] == "make_thing"


def test_a_dip_is_not_growth(db):
    for when, n in ((0.0, 1000), (10.0, 3000), (20.0, 2000), (30.0, 4000)):
        record(db, report(n), when)
    _ids, series = db.site_series(10, 500, 3)
    assert detect_growth(series, scans=3, bytes_per_hour=0) == []
    _ids, series = db.site_series(10, 500, 2)
    assert len(detect_growth(series, scans=2, bytes_per_hour=0)) == 1


def test_expire_drops_old_scans_and_their_sites(db):
    record(db, report(1000, 300), 1000.0)
    record(db, report(1000), 1000.0 + 86400 * 3)
    assert db.expire(2, now=1000.0 + 86400 * 3) == 1
    assert len(db.scans()) == 1
    assert db.frames(site_signature(FRAMES_B)) == []
    assert db.frames(site_signature(FRAMES_A)) != []


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unreachable.cli.main", "history", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_history_text_json_and_filters(db):
    record(db, report(1000), 1000.0)
    record(db, report(2000), 1100.0)
    record(db, report(500), 1200.0, pid=77, unit="other.service")
    db.record_failure(
        process(78, 1, "other.service", name="x", command="x"),
        trigger="scheduled",
        error="pid 78: not under the shim",
        when=1300.0,
    )
    res = cli("--db", db.path, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [s["pid"] for s in data["scans"]] == [10, 10, 77, 78]
    assert data["scans"][1]["sites"] == [
        {"site": site_signature(FRAMES_A), "bytes": 2000, "count": 20}
    ]
    assert data["sites"][site_signature(FRAMES_A)][0]["rel_pc"] == 0x1234
    by_unit = json.loads(cli("--db", db.path, "--json", "--unit", "app.service").stdout)
    assert {s["unit"] for s in by_unit["scans"]} == {"app.service"}
    by_pid = json.loads(cli("--db", db.path, "--json", "--pid", "77").stdout)
    assert [s["leak_bytes"] for s in by_pid["scans"]] == [500]
    text = cli("--db", db.path, "--sites", "--unit", "other.service")
    assert text.returncode == 0, text.stderr
    assert "not under the shim" in text.stdout
    assert "call sites of app[77]" in text.stdout and "make_thing+0x4 (app)" in text.stdout
    newest = json.loads(cli("--db", db.path, "--json", "--limit", "1").stdout)
    assert [s["pid"] for s in newest["scans"]] == [78]


def test_cli_history_without_a_database(tmp_path):
    res = cli("--db", str(tmp_path / "none.sqlite"))
    assert res.returncode == 2
    assert res.stderr.startswith("unreachable-cli: error: no history at")
