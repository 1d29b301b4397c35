"""Under a seccomp allowlist the program installed itself, the shim's
region must not grow by a call the filter may refuse: vsftpd's grants
mprotect only PROT_READ, and its session was killed (SIGSYS) in the shim's
mprotect(PROT_READ | PROT_WRITE) of a registry page. The region commits its
room as the filter goes in and grows no more after (native/shim/region.h
ur_region_fix); blocks past that room go unregistered, and a scan refuses
the process with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cbuild import build

PROGRAM = Path(__file__).resolve().parent / "programs" / "region_under_filter.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
BLOCKS = "1000000"  # 32 MiB of 32-byte blocks: past the room a small region commits


def test_the_program_itself_is_correct():
    exe = build(PROGRAM)
    res = subprocess.run([str(exe), BLOCKS], input="", capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("READY"), res


@pytest.mark.parametrize("options", [None, "backtrace=16"])
def test_a_registry_growing_under_the_programs_filter_does_not_kill_it(targets, options):
    target = targets.start(PROGRAM, BLOCKS, options=options, wait_helper=False)
    assert target.alive()
    res = subprocess.run(
        [*CLI, "scan", str(target.pid)], capture_output=True, text=True, timeout=120
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(lines) == 1, (res.returncode, res.stdout, res.stderr)
    assert "seccomp filter" in lines[0] and "blocks are not registered" in lines[0], lines
    assert target.alive() and target.tracer() == 0
    assert target.proc.stdin is not None
    target.proc.stdin.close()
    assert target.proc.wait(timeout=60) == 0
