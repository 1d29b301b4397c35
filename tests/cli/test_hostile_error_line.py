"""An error line quotes what the target named: a refused registry region
names the file it covers, the target's own program. A program run from a
path holding a terminal escape (the kernel's maps escape a newline, not an
escape) had that escape written to the terminal with the error; the line
is now written with `\\xNN` escapes, one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.scan.test_forged_registry import PROGRAM
from tests.support.cbuild import build
from tests.support.targets import Target

ESCAPE = "\x1b[2J"


def test_an_error_quoting_the_targets_path_is_one_printable_line(targets, tmp_path):
    where = tmp_path / f"odd{ESCAPE}dir"
    where.mkdir()
    exe = where / "prog"
    shutil.copy(build(PROGRAM), exe)
    proc = subprocess.Popen(
        [str(exe), "regions"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, LD_PRELOAD=str(targets.shim), UNREACHABLE_MALLOC_OPTIONS=""),
    )
    target = Target(proc)
    targets.started.append(target)
    assert target.read_line().startswith("READY")
    cmd = [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid)]
    res = subprocess.run([*cmd, "--snapshot", "stopped"], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert "covers" in res.stderr and "\\x1b[2J" in res.stderr, res.stderr
    assert ESCAPE not in res.stderr and res.stderr.count("\n") == 1
    assert target.alive() and target.tracer() == 0
