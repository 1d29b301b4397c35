"""fork() under the shim costs the parent no page fault more than under
glibc alone: the words the fork handlers write after the fork (the shards'
locks and owners, the stack table's lock, the unwinder's gate, the
forker's own flags) are on pages the child does not share
(MADV_WIPEONFORK), and the handlers store nothing else the child shares
(docs/shim.md, "fork"). A count, not a time: each such page was a fault
and a page copy on every fork (9 more than glibc's 2-3 before). A child
starts with those words zeroed, so it must find them all usable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shim.support import program, run_ok
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"

FORKS = "200"
# Faults per fork the shim may add: one, the stack page below the one glibc's
# fork writes, which the handlers' deeper frames reach when the stack's
# random placement puts them across a page boundary (one run in three or
# so, the same in every fork of that process). Each shared page the
# handlers wrote was one more: 9-10 before they moved to unshared pages.
EXTRA = 1.5


def faults_per_fork(exe: Path, threads: int, shim: Path | None) -> float:
    out = run_ok(exe, FORKS, str(threads), shim=shim)
    return float(out.split()[1])


@pytest.mark.parametrize("threads", [0, 4])
def test_the_shim_adds_no_page_fault_to_fork(shim: Path, threads: int) -> None:
    exe = program("fork_faults.c")
    plain = faults_per_fork(exe, threads, None)
    shimmed = faults_per_fork(exe, threads, shim)
    assert shimmed <= plain + EXTRA, (plain, shimmed)


@pytest.mark.parametrize("snapshot", ["stopped", "fork"])
def test_a_child_uses_every_shard_its_parents_threads_owned(targets, snapshot: str) -> None:
    """The child's fork words start zeroed (free, unowned): it frees the
    blocks of shards its parent's threads owned, allocates and frees in
    nearly every shard, forks a grandchild that does the same, and a scan
    of it finds exactly its two leaks."""
    parent = targets.start(PROGRAMS / "fork_shards.c")
    parent.send("fork")
    line = parent.read_line()
    assert line.startswith("CHILD ") and not line.startswith("CHILD -1"), line
    fields = dict(f.split("=") for f in line.split()[2:])
    report = scan(int(line.split()[1]), ScanOptions(snapshot=snapshot))
    assert report.snapshot == snapshot
    assert (report.leak_count, report.leak_bytes) == (
        int(fields["leak_count"]),
        int(fields["leak_bytes"]),
    )
