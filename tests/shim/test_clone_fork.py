"""A fork made by syscall(SYS_clone, flags, NULL) (vsftpd's isolated session
processes) passes glibc's fork and its atfork handlers by. The shim, which
exports syscall(), now runs its fork handlers around it: before, the child
kept the parent's descriptor (its pid, its helper's tid) and no helper of its
own, so the daemon did not list it, a fork scan failed ("the helper thread
ended before the stop") and copy scans gave a wrong reason ("a seccomp
filter"); a lock the parent's helper held at the clone stayed held."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.scanner.procs import children, state, wait_until
from tests.support.cbuild import build
from unreachable._paths import shim_path
from unreachable.daemon.targets import target_info
from unreachable.process.status import read_status
from unreachable.scan import ScanOptions, scan

PROGRAM = Path(__file__).resolve().parent / "programs" / "clone_fork.c"


@pytest.mark.parametrize("flags", ["newipc", "newpid"])
def test_a_child_forked_by_a_raw_clone_is_a_target_of_its_own(flags):
    if os.geteuid() != 0:
        pytest.skip("clone with new namespaces needs CAP_SYS_ADMIN")
    env = dict(os.environ, LD_PRELOAD=shim_path())
    proc = subprocess.Popen(
        [str(build(PROGRAM)), flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("READY"), line
        (child,) = children(proc.pid)
        wait_until(lambda: "ur-helper" in _comms(child), what="the child's own helper")
        info = target_info(child)
        assert info is not None and info.pid == child
        for mode in ("fork", "copy", "stopped", "concurrent"):
            report = scan(child, ScanOptions(snapshot=mode))
            assert (report.leak_count, report.leak_bytes) == (1, 40), (mode, report.snapshot_note)
            assert report.snapshot == mode, report.snapshot_note
            assert state(child) in "SR" and read_status(child).tracer_pid == 0
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _comms(pid: int) -> set[str]:
    names = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            names.add(Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip())
        except OSError:
            pass
    return names
