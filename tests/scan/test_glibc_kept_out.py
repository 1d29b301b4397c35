"""A process without the shim that keeps memory out of forks
(MADV_DONTFORK, MADV_WIPEONFORK) gets the injected fork all the same: what
its child lacks or has wiped is read from the target while it is stopped
for the clone, and its words are roots, as under the shim
(docs/glibc-heap.md, "Memory kept out of forks"). The pause is the fork's
and that read, never a copy of the whole memory. More than the scanner may
hold, or a child that lacks part of glibc's heap itself, gets the whole
copy, and the report says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cgroups import memory_cgroup
from unreachable.scan import ScanOptions, scan

PROGRAM = Path(__file__).parent / "programs" / "kept_out_no_shim.c"
PAGE = 4096
MIB = 1 << 20
WORD = (1 << 64) - 1


def _exact(target, report) -> None:
    """The two dropped blocks, and not the two kept only from memory kept
    out of forks."""
    leaked = sorted(~target.int(k) & WORD for k in ("leak1", "leak2"))
    assert sorted(e.address for e in report.leaks) == leaked, report.snapshot_note
    assert report.allocations == "glibc heap"
    assert target.alive() and target.tracer() == 0


def test_the_injected_fork_reads_what_its_child_lacks_in_the_pause(targets):
    target = targets.start(PROGRAM, preload=False, wait_helper=False)
    report = scan(target.pid, ScanOptions())
    # The injected fork, not the whole copy: its pause read the two pages
    # kept out of forks, one left out of the child and one wiped in it.
    assert (report.snapshot, report.snapshot_note) == ("fork", "")
    assert report.roots["kept out of fork"] == 2 * PAGE
    _exact(target, report)


def test_more_than_the_scanner_may_hold_gets_the_whole_copy(targets):
    """20 MiB kept out of forks, the scanner in a memory cgroup of 72 MiB
    (its interpreter takes part of it): its copies held to half the room
    left, no more than a quarter of it (under 20 MiB from 64 to 88 MiB) may
    be read in a fork's pause, so no child is made and the whole copy
    (which fits) is taken, its note saying why."""
    target = targets.start(PROGRAM, "20", preload=False, wait_helper=False)
    with memory_cgroup("ur-glibc-kept-out") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cg.limit(72 * MIB)
        cmd = [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid), "--json"]
        res = subprocess.run(cmd, preexec_fn=cg.enter, capture_output=True, text=True)
        assert cg.oom_kills() == 0
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert doc["snapshot"] == "stopped"
    assert "out of forks" in doc["snapshot_note"]
    assert "more than this scanner may hold" in doc["snapshot_note"]
    assert "kept out of fork" not in doc["roots"]
    leaked = sorted(~target.int(k) & WORD for k in ("leak1", "leak2"))
    assert sorted(e["address"] for e in doc["leaks"]) == leaked
    assert doc["allocations"] == "glibc heap"
    assert target.alive() and target.tracer() == 0


def test_a_child_that_lacks_part_of_glibcs_heap_gets_the_whole_copy(targets):
    """A live block glibc mapped alone is itself kept out of forks: the walk
    over the child cannot account for it, and the whole copy follows."""
    target = targets.start(PROGRAM, "0", "in-heap", preload=False, wait_helper=False)
    report = scan(target.pid, ScanOptions())
    assert report.snapshot == "stopped"
    assert "glibc's heap could not be walked in it" in report.snapshot_note, report.snapshot_note
    _exact(target, report)
