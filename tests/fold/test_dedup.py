from __future__ import annotations

from unreachable.fold.dedup import dedup
from unreachable.sweep.mark import LEAK_RECORD


def packed(records: list[tuple[int, int, int, int, int]]) -> bytes:
    """(begin, size, referenced_count, referenced_size, stack_id) in address order."""
    return b"".join(LEAK_RECORD.pack(b, s, c, rs, sid, 0) for b, s, c, rs, sid in records)


def test_same_backtrace_merges_into_first_by_address():
    records = [
        (0x1000, 10, 2, 9, 5),
        (0x2000, 20, 1, 7, 5),
        (0x3000, 30, 0, 0, 0),
        (0x4000, 40, 0, 0, 0),
    ]
    leaks = dedup(packed(records), limit=100)
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
    blocks = [(0x1000 * (i + 1), i + 1) for i in range(10)] + [(0x20000, 10)]
    leaks = dedup(packed([(b, s, 0, 0, 0) for b, s in blocks]), limit=3)
    assert [(x.size, x.begin) for x in leaks] == [(10, 0xA000), (10, 0x20000), (9, 0x9000)]


def test_limit_zero():
    assert dedup(packed([(0x1000, 10, 0, 0, 0)]), limit=0) == []
