"""malloc_usable_size under every option is the size a scan reads.

A program may store data, pointers included, anywhere below
malloc_usable_size. If an option made it answer glibc's rounded-up size while
the scan reads only the requested bytes, a pointer kept in that tail would be
missed and its target reported as a leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from unreachable.scan import ScanOptions, scan

PROGRAM = Path(__file__).resolve().parent / "programs" / "usable_tail.c"

OPTIONS = [
    "",
    "expand_alloc",
    "expand_alloc=1000",
    "verify_pointers",
    "fill",
    "fill_on_alloc",
    "fill_on_free",
    "fill_on_alloc=8",
    "free_track",
    "record_allocs",
    "front_guard",
    "front_guard=48",
    "rear_guard",
    "guard",
    "leak_track",
    "abort_on_error",
    "backtrace",
    "guard fill expand_alloc free_track=20 verify_pointers record_allocs",
]


def test_glibc_answers_more_than_requested(targets):
    """The program does put pointers in tails when the answer allows it."""
    target = targets.start(PROGRAM, preload=False)
    assert target.int("stored") > 100 and target.int("differ") > 100


@pytest.mark.parametrize("options", OPTIONS)
def test_usable_size_is_requested_size(targets, options):
    target = targets.start(PROGRAM, options=options)
    report = scan(target.pid, ScanOptions())
    assert (report.leak_count, report.leak_bytes) == (0, 0), [
        (hex(e.address), e.size) for e in report.leaks
    ]
    assert (target.int("stored"), target.int("differ")) == (0, 0)
