"""Session processes made by a raw clone() (vsftpd's) are targets of their
own to unreachabled: ListTargets lists each, and a scan of one finds its
leak and only that. Before, each kept its parent's descriptor (its pid),
and the daemon, taking it for a scan's snapshot child, left it out."""

from __future__ import annotations

from tests.daemon.test_daemon import scan_report, stub
from tests.support.raw_clone import LEAK_SIZE, raw_clone_family
from unreachable.v1 import unreachable_pb2 as pb


def test_raw_clone_children_are_listed_and_scanned(daemon, shim):
    with raw_clone_family(shim, "newipc") as family:
        s = stub(daemon.address)
        reply = s.ListTargets(pb.ListTargetsRequest(), timeout=60)
        listed = {t.pid: t for t in reply.targets}
        assert family.parent.pid in listed
        for child in family.children:
            assert child.pid in listed and listed[child.pid].enabled
        child = family.quiet()
        report = scan_report(s, pid=child.pid)
        assert {(leak.address, leak.size) for leak in report.leaks} == {(child.leak, LEAK_SIZE)}
        assert report.snapshot == "stopped", report.snapshot
