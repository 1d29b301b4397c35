"""unreachabled, often root, scanning a process that overwrote the shim's
registry in its own memory: the scan is FAILED_PRECONDITION with the one
line the CLI prints, and the target is left running, untraced. The memory
bound is the CLI's test (tests/scan/test_forged_registry.py): the worker
runs the same reader."""

from __future__ import annotations

import logging

import grpc
import pytest

from tests.daemon.test_daemon import rpc_code, scan_report, stub, wait_untraced
from tests.scan.test_forged_registry import CORRUPT, PROGRAM
from tests.support.cgroups import memory_cgroup
from unreachable.daemon.targets import target_info
from unreachable.v1 import unreachable_pb2 as pb


@pytest.mark.parametrize("snapshot", [pb.SNAPSHOT_AUTO, pb.SNAPSHOT_STOPPED])
@pytest.mark.parametrize("what", ["shards", "maps"])
def test_a_forged_registry_is_a_failed_precondition(daemon, targets, what, snapshot):
    options = "backtrace=4" if what == "shards" else ""
    target = targets.start(PROGRAM, what, "1024", options=options)
    request = pb.ScanRequest(pid=target.pid, snapshot=snapshot)
    code, details = rpc_code(stub(daemon.address).Scan, request, timeout=120)
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert CORRUPT in details and "\n" not in details.strip()
    assert target.alive()
    assert wait_untraced(target.pid) in "SR"


@pytest.mark.parametrize(
    ("what", "says"),
    [
        ("magic", "the shim's registry descriptor is not one (magic"),
        ("version", "runs a shim with registry ABI"),
    ],
)
def test_a_descriptor_of_another_magic_or_version_is_a_failed_precondition(
    daemon, targets, what, says
):
    target = targets.start(PROGRAM, what, options="")
    request = pb.ScanRequest(pid=target.pid, snapshot=pb.SNAPSHOT_AUTO)
    code, details = rpc_code(stub(daemon.address).Scan, request, timeout=120)
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert says in details and "\n" not in details.strip()
    assert target.alive()
    assert wait_untraced(target.pid) in "SR"


def test_forged_shard_counts_do_not_make_the_daemons_memory_estimate(daemon, targets):
    """Shards claiming 2^40 live entries over their real tables: the daemon
    under a memory limit refused the sweep as RESOURCE_EXHAUSTED, needing
    terabytes; the tables' present pages bound the count, and the scan
    finds the one real leak."""
    target = targets.start(PROGRAM, "counts", options="backtrace=4")
    with memory_cgroup("ur-daemon-counts") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cg.move(daemon.proc.pid)
        cg.limit(cg.usage() + 160 * (1 << 20))
        s = stub(daemon.address)
        for snapshot in (pb.SNAPSHOT_STOPPED, pb.SNAPSHOT_FORK):
            request = {"pid": target.pid, "snapshot": snapshot, "sweep": pb.SWEEP_SCANNER}
            assert scan_report(s, **request).leak_count == 1
        assert cg.oom_kills() == 0
    assert target.alive()
    assert wait_untraced(target.pid) in "SR"


def test_a_shimmed_process_left_unlisted_says_why_at_debug(targets, caplog):
    """A shimmed process whose descriptor cannot be read is not listed, as a
    snapshot copy is not; the reason is logged, so that a target the daemon
    never watches (its files refused, say) does not vanish without a word."""
    target = targets.start(PROGRAM, "magic", options="")
    with caplog.at_level(logging.DEBUG, logger="unreachabled.targets"):
        assert target_info(target.pid) is None
    assert f"pid {target.pid} maps the shim but is not listed" in caplog.text
    assert "is not one (magic" in caplog.text
