"""A shimmed process in a pid namespace of its own (a container's) is a
target like any other: the shim records getpid(), its id in its namespace,
and ListTargets took that id differing from the daemon's for the mark of a
scan's snapshot child, so it listed no process of any container and the
background scans watched none (rsync's daemon in one, found in use)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cbuild import build
from tests.support.container import in_container
from unreachable.daemon.targets import list_targets, target_info

LEAKER = Path(__file__).resolve().parents[1] / "symbolize" / "programs" / "leaker.c"


def test_a_process_in_a_container_is_listed(tmp_path):
    with in_container(build(LEAKER), tmp_path) as (pid, exe):
        info = target_info(pid)
        assert info is not None
        assert info.command == str(exe) and info.enabled and "backtrace=16" in info.options
        assert pid in {t.pid for t in list_targets()}
