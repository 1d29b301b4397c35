"""A fork snapshot's child holds no reference to the target's open files:
a socket the target closes while the child exists is closed then, as
without a scan. haproxy, which lets close() take a connection out of its
epoll set, answered 502 to about 1% of requests during fork scans while the
child kept its closed backend connections registered there."""

from __future__ import annotations

from pathlib import Path

from unreachable.capture.stop_world import CaptureRequest
from unreachable.capture.strategies import take_snapshot
from unreachable.capture.target import open_target

PROGRAM = Path(__file__).parent / "programs" / "close_while_snapshot.c"


def test_a_socket_closed_while_the_snapshot_exists_is_closed(targets):
    target = targets.start(PROGRAM)
    request = CaptureRequest("fork", must="snapshot failed: ", roots=False)
    with take_snapshot(open_target(target.pid), request) as capture:
        assert capture.snapshot == "fork"
        target.send("close")
        seen = target.read_line()
    assert seen == "peer=eof", seen
    assert target.alive() and target.tracer() == 0
