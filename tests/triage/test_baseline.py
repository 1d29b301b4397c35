"""scan --baseline on real scans of tests/triage/programs/sites.c.

sites.c leaks 31 bytes from load_config and 3 x 48 from cache_insert; on
"grow" 2 x 48 more from cache_insert and 100 bytes from new_site.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cbuild import build
from tests.support.targets import Target

PROGRAMS = Path(__file__).parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "UNREACHABLE_SUPPRESSIONS"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env)


def save(pid: int, path: Path) -> dict:
    res = cli("scan", str(pid), "--json", "--limit", "1000", "-o", str(path))
    assert res.returncode == 1, res.stderr
    return json.loads(path.read_text())


def grow(target) -> None:
    target.send("grow")
    line = target.read_line()
    assert line.startswith("GROWN"), line


def test_only_what_is_new_or_grew_is_reported(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c", options="backtrace=16")
    old = tmp_path / "old.json"
    save(target.pid, old)
    grow(target)
    res = cli("scan", str(target.pid), "--json", "--baseline", str(old))
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    # 2 more blocks of cache_insert, 1 of new_site: 96 + 100 bytes.
    assert (doc["leak_count"], doc["leak_bytes"]) == (3, 196)
    base = doc["baseline"]
    assert (base["file"], base["leak_count"], base["leak_bytes"]) == (str(old), 4, 175)
    assert (base["now_count"], base["now_bytes"]) == (7, 371)
    assert (base["unlisted_count"], base["unlisted_bytes"]) == (0, 0)
    sites = {s["site"][0]: s for s in base["sites"]}
    assert sorted(sites) == [
        f"cache_insert ({os.path.basename(target.proc.args[0])})",
        f"new_site ({os.path.basename(target.proc.args[0])})",
    ]
    by_size = {leak["size"]: leak["site"] for leak in doc["leaks"]}
    assert sorted(by_size) == [48, 100]  # load_config's leak did not change: not listed
    strip = ("new", "old_count", "old_bytes", "count", "bytes", "delta_count", "delta_bytes")
    assert [by_size[48][k] for k in strip] == [False, 3, 144, 5, 240, 2, 96]
    assert [by_size[100][k] for k in strip] == [True, 0, 0, 1, 100, 1, 100]

    text = cli("scan", str(target.pid), "--baseline", str(old))
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert lines[0] == "  196 bytes in 3 unreachable allocations"
    assert lines[2] == (
        f"  new or grown since {old}: 2 sites; baseline 175 bytes in 4 allocations,"
        " now 371 bytes in 7 allocations"
    )
    assert "   site grew: 144 -> 240 bytes (+96), 3 -> 5 allocations (+2)" in lines
    assert "   new site: 100 bytes in 1 allocation" in lines


def test_unchanged_exits_zero(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c", options="backtrace=16")
    old = tmp_path / "old.json"
    save(target.pid, old)
    res = cli("scan", str(target.pid), "--json", "--baseline", str(old))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["leak_count"], doc["leak_bytes"], doc["leaks"]) == (0, 0, [])
    assert (doc["baseline"]["now_count"], doc["baseline"]["sites"]) == (4, [])


def installed(tmp_path: Path, where: str, cflags: list[str]) -> Path:
    """sites.c built with cflags and installed as WHERE/sites, so that two
    builds have one name, as a rebuilt program has."""
    exe = tmp_path / where / "sites"
    exe.parent.mkdir()
    shutil.copy(build(PROGRAMS / "sites.c", cflags=cflags), exe)
    return exe


def start(targets, exe: Path) -> Target:
    env = dict(os.environ, LD_PRELOAD=str(targets.shim), UNREACHABLE_MALLOC_OPTIONS="backtrace=16")
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    target = Target(proc)
    targets.started.append(target)  # stopped by the fixture
    assert target.read_line().startswith("READY")
    return target


def test_sites_match_across_processes_and_a_rebuild(targets, tmp_path):
    """Another process (other ASLR addresses) of the program rebuilt with its
    code moved (-DPAD): the same sites, nothing new."""
    first = start(targets, installed(tmp_path, "v1", []))
    old = tmp_path / "old.json"
    before = save(first.pid, old)
    second = start(targets, installed(tmp_path, "v2", ["-DPAD"]))
    res = cli("scan", str(second.pid), "--json", "--baseline", str(old))
    doc = json.loads(res.stdout)
    assert res.returncode == 0, doc
    assert (doc["leak_count"], doc["baseline"]["now_count"]) == (0, 4)
    # The allocating frames did move.
    now = json.loads(cli("scan", str(second.pid), "--json").stdout)
    pcs = [{leak["backtrace"][0]["rel_pc"] for leak in d["leaks"]} for d in (before, now)]
    assert pcs[0].isdisjoint(pcs[1]), pcs


def test_suppressions_apply_before_the_comparison(targets, tmp_path):
    target = targets.start(PROGRAMS / "sites.c", options="backtrace=16")
    old = tmp_path / "old.json"
    save(target.pid, old)
    grow(target)
    supp = tmp_path / "s.supp"
    supp.write_text("leak:new_site\n")
    res = cli(
        "scan", str(target.pid), "--json", "--baseline", str(old), "--suppressions", str(supp)
    )
    doc = json.loads(res.stdout)
    assert res.returncode == 1
    assert (doc["leak_count"], doc["leak_bytes"], doc["suppressed_bytes"]) == (2, 96, 100)


def test_bad_baselines_are_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases = [
        (tmp_path / "none.json", "cannot read: No such file or directory"),
        (bad, "not a JSON scan report (scan --json)"),
    ]
    chained = tmp_path / "chained.json"
    chained.write_text(json.dumps({"leaks": [], "leak_count": 0, "leak_bytes": 0, "baseline": {}}))
    cases.append((chained, "lists only what grew against another baseline"))
    for path, why in cases:
        res = cli("scan", "1", "--baseline", str(path))
        assert res.returncode == 2 and res.stdout == "", res
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"unreachable-cli: error: {path}: {why}"), (
            lines
        )


def test_baseline_refuses_profile_formats(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"leaks": [], "leak_count": 0, "leak_bytes": 0}))
    res = cli("scan", "1", "--baseline", str(old), "--format", "pprof", "-o", str(tmp_path / "p"))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("unreachable-cli: error: --baseline prints text, json or lmu")
