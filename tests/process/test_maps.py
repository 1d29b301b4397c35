"""/proc/PID/maps of a running target that keeps mapping and unmapping
pages: every listing read_maps gives is in order, none overlapping (the
kernel's own listing is not, now and then: it is written a piece at a
time, and a copy's sync refused the unsorted ranges with a ValueError)."""

from __future__ import annotations

from pathlib import Path

from unreachable.process.maps import _in_order, parse_maps, read_maps

CHURN = Path(__file__).resolve().parents[1] / "capture" / "programs" / "root_unmapper.c"


def test_every_listing_of_a_target_changing_its_mappings_is_in_order(targets):
    target = targets.start(CHURN)
    for _ in range(3000):
        mappings = read_maps(target.pid)
        pairs = zip(mappings, mappings[1:], strict=False)
        assert all(a.end <= b.start for a, b in pairs), [
            (hex(m.start), hex(m.end)) for m in mappings
        ]


def test_an_entry_a_later_one_overlaps_is_left_out():
    text = (
        "1000-3000 rw-p 00000000 00:00 0\n"
        "1000-4000 rw-p 00000000 00:00 0\n"
        "5000-6000 rw-p 00000000 00:00 0\n"
    )
    assert [(m.start, m.end) for m in _in_order(parse_maps(text))] == [
        (0x1000, 0x4000),
        (0x5000, 0x6000),
    ]
