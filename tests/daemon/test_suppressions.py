"""The daemon's `suppressions` setting: every scan it serves applies the files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROGRAM = Path(__file__).parent.parent / "triage" / "programs" / "sites.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
DASHES = "-" * 53


def test_config_suppressions_apply_to_the_daemons_scans(daemons, targets, tmp_path):
    (tmp_path / "app.supp").write_text("leak:^load_config$\n")
    config = tmp_path / "d.toml"
    config.write_text('suppressions = "app.supp"\n')  # relative to the config file
    d = daemons.start("--config", str(config))
    target = targets.start(PROGRAM, options="backtrace=16")
    res = subprocess.run(
        [*CLI, "scan", str(target.pid), "--json", "--remote", d.address],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    # sites.c: 175 bytes in 4 allocations, 31 in 1 of them from load_config.
    assert (doc["leak_count"], doc["leak_bytes"]) == (3, 144)
    assert {leak["size"] for leak in doc["leaks"]} == {48}


def test_bad_suppression_file_stops_the_daemon_at_start(daemons, tmp_path):
    (tmp_path / "bad.supp").write_text("leak:fine\nthread:foo\n")
    config = tmp_path / "d.toml"
    config.write_text('suppressions = ["bad.supp"]\n')
    d = daemons.start("--config", str(config), wait=False)
    assert d.proc.wait(timeout=60) == 2
    d.wait_for_log(
        rf"suppressions: {tmp_path}/bad.supp:2: unknown suppression type 'thread'", timeout=10
    )


def test_remote_scans_apply_the_clients_files(daemon, targets, tmp_path):
    """--suppressions, --print-suppressions and --baseline with --remote work on
    the client, on every entry the daemon sends; no contents are asked for."""
    target = targets.start(PROGRAM, options="backtrace=16")
    supp = tmp_path / "app.supp"
    supp.write_text("leak:^cache_insert$\n")
    gen = tmp_path / "gen.supp"
    res = subprocess.run(
        [*CLI, "scan", str(target.pid), "--remote", daemon.address, "--suppressions", str(supp)]
        + ["--print-suppressions", str(gen)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "  31 bytes in 1 unreachable allocation"
    assert "      3        144 ^cache_insert$" in lines
    assert [r for r in gen.read_text().splitlines() if r.startswith("leak:")] == [
        "leak:^load_config$"
    ]


def _scan(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "UNREACHABLE_SUPPRESSIONS"}
    return subprocess.run(
        [*CLI, "scan", *args], capture_output=True, text=True, timeout=120, env=env
    )


# What differs between two scans of one process: when and how it was taken.
TIMINGS = ("pause_ms", "hold_ms", "scan_ms", "snapshot", "snapshot_note", "sweep", "sweep_note")


def _same_scan(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in TIMINGS}


def test_remote_scan_prints_the_daemons_suppressions_as_a_local_scan(daemons, targets, tmp_path):
    """A plain scan --remote of a daemon whose config has suppressions prints
    LSan's 'Suppressions used' block and the JSON fields, exactly as a local
    scan with the same file does."""
    supp = tmp_path / "app.supp"
    supp.write_text("# the config string lives until exit\nleak:^load_config$\n")
    config = tmp_path / "d.toml"
    config.write_text(f'suppressions = "{supp}"\n')
    d = daemons.start("--config", str(config))
    target = targets.start(PROGRAM, options="backtrace=16")
    remote = _scan(str(target.pid), "--remote", d.address)
    local = _scan(str(target.pid), "--suppressions", str(supp))
    assert (remote.returncode, local.returncode) == (1, 1), remote.stderr + local.stderr
    assert remote.stdout == local.stdout
    assert remote.stdout.splitlines()[-6:] == [
        DASHES,
        "Suppressions used:",
        "  count      bytes template",
        "      1         31 ^load_config$",
        DASHES,
        "",
    ]
    remote = _scan(str(target.pid), "--remote", d.address, "--json")
    local = _scan(str(target.pid), "--suppressions", str(supp), "--json")
    assert (remote.returncode, local.returncode) == (1, 1), remote.stderr + local.stderr
    doc = json.loads(remote.stdout)
    assert _same_scan(doc) == _same_scan(json.loads(local.stdout))
    assert (doc["suppressed_count"], doc["suppressed_bytes"]) == (1, 31)
    assert doc["suppressions"] == [
        {"pattern": "^load_config$", "file": str(supp), "line": 2, "count": 1, "bytes": 31}
    ]
    assert [(x["size"], x["suppression"]) for x in doc["suppressed_leaks"]] == [
        (31, "^load_config$")
    ]


def test_clients_suppressions_add_to_the_daemons(daemons, targets, tmp_path):
    """--suppressions on the client after the daemon's: one block, the
    daemon's rules first, the totals losing both."""
    (tmp_path / "d.supp").write_text("leak:^load_config$\n")
    (tmp_path / "c.supp").write_text("leak:^cache_insert$\n")
    config = tmp_path / "d.toml"
    config.write_text('suppressions = "d.supp"\n')
    d = daemons.start("--config", str(config))
    target = targets.start(PROGRAM, options="backtrace=16")
    res = _scan(str(target.pid), "--remote", d.address, "--suppressions", str(tmp_path / "c.supp"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "  0 bytes in 0 unreachable allocations"
    assert lines[-7:-1] == [
        DASHES,
        "Suppressions used:",
        "  count      bytes template",
        "      1         31 ^load_config$",
        "      3        144 ^cache_insert$",
        DASHES,
    ]
