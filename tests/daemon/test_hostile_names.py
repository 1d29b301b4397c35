"""The daemon logs a watched process by its comm (`name[pid]`) and labels
its metrics with it, and `targets` lists comm and command line: a target
whose comm and arguments hold a newline and terminal escapes wrote a log
line of its own choosing and steered the terminal reading the list. They
are written as `\\xNN` escapes."""

from __future__ import annotations

import subprocess
import sys

from tests.triage.test_hostile_names import ARGUMENT, COMM, PROGRAM
from unreachable.daemon.matching import read_process


def test_the_daemons_label_for_a_process_is_one_printable_line(targets):
    target = targets.start(PROGRAM, COMM, ARGUMENT)
    info = read_process(target.pid)
    assert info is not None
    for text in (info.label(), info.name, info.command, info.argv0):
        assert text.isprintable(), text
    assert info.name == "x\\x0aleak:*\\x1b[2J"


def test_targets_lists_each_process_on_one_printable_line(targets):
    target = targets.start(PROGRAM, COMM, ARGUMENT)
    cmd = [sys.executable, "-m", "unreachable.cli.main", "targets"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    mine = [line for line in res.stdout.splitlines() if line.split()[:1] == [str(target.pid)]]
    assert len(mine) == 1, res.stdout
    assert mine[0].isprintable() and "leak:*" in mine[0]
    assert "\x1b" not in res.stdout
