"""A block kept only by a pointer one past its end is in use, with the shim
and without it, in every snapshot mode (docs/design.md "Mark").

past_end.c keeps four such blocks (one in a chunk's slack, one whose end is
its chunk's usable end, one mmap'ed alone, one by
a pointer held in another block) and leaks one of 40 bytes. The shim's
modes run in test_scenarios.py; here the scans without it, whose blocks are
glibc's chunks, must give the same count."""

from __future__ import annotations

from pathlib import Path

import pytest

from unreachable.retention.why import format_text, why
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
HEAP_SLACK = 24  # a chunk's usable bytes beyond the request, at most


# The default is a copy-on-write child made by an injected clone; "stopped"
# copies the whole heap (`--snapshot fork` itself needs the shim's helper).
@pytest.mark.parametrize(("snapshot", "made"), [("auto", "fork"), ("stopped", "stopped")])
def test_one_past_the_end_keeps_a_block_without_the_shim(targets, snapshot, made):
    target = targets.start(PROGRAMS / "past_end.c", preload=False, wait_helper=False)
    report = scan(target.pid, ScanOptions(snapshot=snapshot))
    assert report.allocations == "glibc heap" and report.snapshot == made
    assert report.leak_count == target.int("leak_count") == 1, [
        (hex(e.address), e.size) for e in report.leaks
    ]
    assert 40 <= report.leak_bytes <= 40 + HEAP_SLACK
    assert target.alive() and target.tracer() == 0


@pytest.mark.parametrize("snapshot", ["fork", "stopped"])
def test_one_past_the_end_keeps_a_block_under_the_shim(targets, snapshot):
    target = targets.start(PROGRAMS / "past_end.c")
    report = scan(target.pid, ScanOptions(snapshot=snapshot))
    assert report.allocations != "glibc heap"
    assert (report.leak_count, report.leak_bytes) == (1, 40), [
        (hex(e.address), e.size) for e in report.leaks
    ]
    assert target.alive() and target.tracer() == 0


@pytest.mark.parametrize("under_shim", [False, True])
def test_a_value_where_a_blocks_mapping_ends_does_not_keep_it(targets, under_shim):
    """Without the shim a block mapped alone ends where its mapping ends
    (its usable size, before glibc 2.43); the value there is the next
    mapping's start, not one past the block, which leaks. Under the shim
    the block's requested end lies short of it."""
    alone = {} if under_shim else {"preload": False, "wait_helper": False}
    target = targets.start(PROGRAMS / "mapping_end.c", **alone)
    report = scan(target.pid, ScanOptions(snapshot="stopped"))
    assert (report.allocations == "glibc heap") is not under_shim
    assert [e.address + e.size <= target.int("next_mapping") for e in report.leaks] == [True]
    assert report.leak_count == target.int("leak_count") == 1
    assert target.alive() and target.tracer() == 0


def test_why_follows_a_pointer_one_past_the_end(targets):
    """why names the block a value one past its end refers to, and the word
    in another block that holds such a value as the chain's edge."""
    target = targets.start(PROGRAMS / "past_end.c")
    end = target.int("end_slack")
    data = why(target.pid, end)
    assert (data["block"]["address"], data["block"]["offset"]) == (end - 32, 32)
    assert data["reachable"] and data["root"]["value"] == end
    assert "one past the end of a 32-byte block" in format_text(data)
    held = target.int("end_held")
    data = why(target.pid, held - 1)
    chain = [(s["address"], s["size"], s["pointer_offset"]) for s in data["chain"]]
    assert chain == [(target.int("holder"), 16, 8), (held - 128, 128, None)], chain
    assert data["chain"][0]["points_to"] == held
