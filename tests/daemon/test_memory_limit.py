"""A daemon under a memory limit (MemoryMax= in production; a v1 memory
cgroup here): its scan subprocesses are the OOM killer's first choice, and a
scan that would sweep from outside and cannot fit is refused with
RESOURCE_EXHAUSTED before it allocates, the daemon and the target unharmed."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests.daemon.test_daemon import cli, rpc_code, scan_report, stub
from tests.support.cgroups import memory_cgroup
from unreachable.v1 import unreachable_pb2 as pb

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
MIB = 1 << 20


def test_a_sweep_the_daemon_cannot_hold_is_refused(daemon, targets):
    target = targets.start(PROGRAMS / "many.c", "300000", "100000")
    with memory_cgroup("ur-daemon") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cg.move(daemon.proc.pid)
        # What a scan subprocess has: as in tests/scan/test_memory_limits.py,
        # where 400k allocations swept from outside were OOM-killed.
        cg.limit(cg.usage() + 64 * MIB)
        s = stub(daemon.address)
        code, details = rpc_code(
            s.Scan, pb.ScanRequest(pid=target.pid, snapshot=pb.SNAPSHOT_STOPPED), timeout=120
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        assert "memory cgroup" in details and "\n" not in details
        assert target.alive() and target.tracer() == 0 and target.state() != "t"
        remote = cli("scan", str(target.pid), "--snapshot", "stopped", "--remote", daemon.address)
        assert remote.returncode == 2 and remote.stderr.count("\n") == 1, remote.stderr
        assert "memory cgroup" in remote.stderr
        # The snapshot child sweeps itself: the daemon's share fits.
        report = scan_report(s, pid=target.pid)
        assert (report.leak_count, report.leak_bytes) == (
            target.int("leak_count"),
            target.int("leak_bytes"),
        )
        assert cg.oom_kills() == 0
        assert daemon.proc.poll() is None


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _oom_score_adj(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/oom_score_adj").read_text().strip()
    except OSError:
        return None


def test_scan_subprocesses_are_the_oom_killers_first_choice(daemon, targets):
    """Watched from outside while a scan runs: the daemon's child (the scan
    subprocess) gets oom_score_adj 1000; the daemon keeps its own."""
    target = targets.start(PROGRAMS / "many.c", "300000", "100000")
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(scan_report, stub(daemon.address), pid=target.pid)
        seen: set[str | None] = set()
        while not call.done() and "1000" not in seen:
            seen |= {_oom_score_adj(c) for c in _children(daemon.proc.pid)}
            time.sleep(0.001)
        assert call.result().leak_count == target.int("leak_count")
    assert "1000" in seen, seen
    assert _oom_score_adj(daemon.proc.pid) != "1000"
