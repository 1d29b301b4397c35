from __future__ import annotations

from tests.support.registry import make_registry
from unreachable.fold.dedup import dedup
from unreachable.sweep.mark import LEAK_RECORD


def packed(records):
    return b"".join(LEAK_RECORD.pack(i, 0, count, size) for i, count, size in records)


def test_same_backtrace_merges_into_first_by_address():
    reg = make_registry([(0x1000, 10), (0x2000, 20), (0x3000, 30), (0x4000, 40)], [5, 5, 0, 0])
    leaks = dedup(packed([(0, 2, 9), (1, 1, 7), (2, 0, 0), (3, 0, 0)]), reg, limit=100)
    merged = next(x for x in leaks if x.stack_id == 5)
    assert merged.begin == 0x1000 and merged.size == 10
    assert (merged.referenced_count, merged.referenced_size) == (2, 9)
    assert (merged.similar_count, merged.similar_size) == (1, 20)
    assert (merged.similar_referenced_count, merged.similar_referenced_size) == (1, 7)
    assert merged.total_size == 10 + 9 + 20 + 7
    # no backtrace: never merged
    assert sorted(x.begin for x in leaks if x.stack_id == 0) == [0x3000, 0x4000]
    assert [x.total_size for x in leaks] == [46, 40, 30]


def test_limit_keeps_the_largest_and_ties_go_to_the_lower_address():
    reg = make_registry([(0x1000 * (i + 1), i + 1) for i in range(10)] + [(0x20000, 10)])
    leaks = dedup(packed([(i, 0, 0) for i in range(11)]), reg, limit=3)
    assert [(x.size, x.begin) for x in leaks] == [(10, 0xA000), (10, 0x20000), (9, 0x9000)]


def test_excluded_in_flight_blocks_are_never_reported():
    reg = make_registry([(0x1000, 10), (0x2000, 20)])
    leaks = dedup(packed([(0, 0, 0), (1, 0, 0)]), reg, limit=10, excluded=frozenset({1}))
    assert [x.begin for x in leaks] == [0x1000]


def test_limit_zero():
    reg = make_registry([(0x1000, 10)])
    assert dedup(packed([(0, 0, 0)]), reg, limit=0) == []
