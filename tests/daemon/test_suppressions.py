"""The daemon's `suppressions` setting: every scan it serves applies the files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROGRAM = Path(__file__).parent.parent / "triage" / "programs" / "sites.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


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
