"""A forked child gets the parent's helper stack with no thread on it: a
scan takes it for anonymous memory, a root, and below the helper's frames
it holds the shim's values and stale words, never roots in the parent
(native/shim/helper.c publish_frames). The child clears them as it starts:
they read as zero, and the scan still finds every leak."""

from __future__ import annotations

from pathlib import Path

from unreachable.allocations.registry import read_registry
from unreachable.capture.target import open_target
from unreachable.process.maps import find_mapping, read_maps
from unreachable.process.memory import read_anonymous
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"


def test_the_parents_helper_frames_are_not_in_a_forked_child(targets):
    parent = targets.start(PROGRAMS / "fork_after_helper.c")
    top = read_registry(parent.pid, open_target(parent.pid).shim.descriptor_addr).helper_frames
    assert top, "the parent's helper published no frames"
    parent.send("fork")
    line = parent.read_line()
    assert line.startswith("CHILD "), line
    child = int(line.split()[1])
    stack = find_mapping(read_maps(child), top)
    assert stack is not None and stack.anonymous
    # Before: the parent's helper's frames, a few hundred words of them.
    below = read_anonymous(child, stack.start, top)
    assert len(below) > 4096 and below.count(0) == len(below)
    report = scan(child, ScanOptions(snapshot="stopped"))
    assert (report.leak_count, report.leak_bytes) == (
        parent.int("leak_count"),
        parent.int("leak_bytes"),
    )
