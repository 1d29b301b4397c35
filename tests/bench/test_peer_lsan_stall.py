"""bench/peer_lsan_bench.py's stall at the stops: the target's heartbeat
and the scanner's stops share one clock, so the gap the stop made is found
among the heartbeat's gaps, and told from the others."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from bench.peer_lsan_bench import Heap, build, scan, split_gaps  # noqa: E402
from unreachable._paths import shim_path  # noqa: E402


@pytest.mark.parametrize("mode", ["stopped", "concurrent"])
def test_the_gap_a_stop_makes_is_found_at_the_stop(tmp_path, mode):
    """A stopped scan of 20 MB holds the heartbeat for its whole mark, a
    concurrent one twice: each time a gap that overlaps a stop window (none
    would if the windows were on another clock than the heartbeat's)."""
    heap = Heap(
        build(tmp_path, sanitize=False), (20_000_000, 16, 1040, 1), {"LD_PRELOAD": str(shim_path())}
    )
    try:
        done = scan(heap, mode, [])
    finally:
        heap.close()
    assert done.leaks > 0, done.note
    assert done.stop_stall_ms > 0, done


def test_a_gap_is_counted_from_the_stop_it_overlaps():
    ms = 1_000_000
    gaps = [(0, 10 * ms), (20 * ms, 23 * ms), (50 * ms, 51 * ms)]
    # The first gap began 5 ms before the stop: counted from the stop's start.
    assert split_gaps(gaps, [(5 * ms, 9 * ms)]) == (5.0, 3.0)
    assert split_gaps(gaps, []) == (0.0, 10.0)
