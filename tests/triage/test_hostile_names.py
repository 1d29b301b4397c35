"""A target names itself: its command line and its comm may hold newlines
and terminal escapes. A generated suppression file wrote the command line
into its header comment as it was, so a target started with `\\nleak:*` in
its arguments put a rule suppressing every leak into the file a user keeps;
the text report and the JSON carried the escapes to the terminal. Each is
now written with `\\xNN` escapes, one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "programs" / "hostile_names.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
ARGUMENT = "\nleak:*\n\x1b]0;owned\x07"
COMM = "x\nleak:*\x1b[2J"  # 14 bytes: comm keeps 15


def _hostile(targets):
    return targets.start(PROGRAM, COMM, ARGUMENT)


def _scan(target, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [*CLI, "scan", str(target.pid), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_command_line_makes_no_rule_in_a_generated_suppression_file(targets, tmp_path):
    target = _hostile(targets)
    out = tmp_path / "suppressions.txt"
    res = _scan(target, "--print-suppressions", str(out))
    assert res.returncode == 1, res.stderr
    written = out.read_text()
    lines = written.splitlines()
    assert "leak:*" not in lines
    assert all(not line or line.startswith(("#", "leak:")) for line in lines), lines
    assert "\\x0aleak:*" in lines[0]
    assert "\x1b" not in written + res.stdout + res.stderr


def test_the_reports_carry_no_control_character_of_the_targets(targets):
    target = _hostile(targets)
    text = _scan(target)
    assert text.returncode == 1, text.stderr
    assert "\x1b" not in text.stdout + text.stderr and "\x07" not in text.stdout
    doc = json.loads(_scan(target, "--json").stdout)
    assert "\n" not in doc["command"] and "\x1b" not in doc["command"]
    assert "leak:*" in doc["command"]  # escaped, not dropped
