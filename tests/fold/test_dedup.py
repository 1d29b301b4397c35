from __future__ import annotations

import random

import pytest

from unreachable import _native
from unreachable.fold.dedup import dedup
from unreachable.sweep.mark import LEAK_RECORD_SIZE


def packed(records: list[tuple[int, int, int, int, int]]) -> bytes:
    """(begin, size, referenced_count, referenced_size, stack_id) in address order."""
    fields = ("begin", "size", "referenced_count", "referenced_size", "stack_id")
    return b"".join(
        _native.abi_encode("ur_leak_record", dict(zip(fields, r, strict=True))) for r in records
    )


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


def _model(records: list[tuple[int, int, int, int, int]], limit: int) -> list[tuple[int, ...]]:
    """What dedup must answer, written plainly: (total, begin, size, stack_id,
    referenced_count, referenced_size, similar_count, similar_size,
    similar_referenced_count, similar_referenced_size) per entry."""
    entries: list[list[int]] = []
    by_stack: dict[int, list[int]] = {}
    for begin, size, ref_count, ref_size, stack_id in records:
        first = by_stack.get(stack_id) if stack_id else None
        if first is None:
            entry = [begin, size, stack_id, ref_count, ref_size, 0, 0, 0, 0]
            entries.append(entry)
            if stack_id:
                by_stack[stack_id] = entry
        else:
            first[5:] = [first[5] + 1, first[6] + size, first[7] + ref_count, first[8] + ref_size]
    ranked = sorted(entries, key=lambda e: (-(e[1] + e[4] + e[6] + e[8]), e[0]))
    return [(e[1] + e[4] + e[6] + e[8], *e) for e in ranked[:limit]]


def test_agrees_with_a_plain_model_on_random_leaks():
    """Many backtraces (the native table grows), few sizes (ties broken by
    address), limits below and above the number of entries."""
    rng = random.Random(7)
    for stacks, limit in [(0, 10), (3, 100), (500, 40), (2000, 5000), (50, 1)]:
        addr, records = 0x10000, []
        for _ in range(3000):
            addr += 16 * rng.randint(1, 8)
            stack = rng.randint(0, stacks) if stacks else 0
            records.append(
                (addr, rng.randint(1, 4) * 16, rng.randint(0, 2), rng.randint(0, 2) * 16, stack)
            )
        got = [
            (
                x.total_size,
                x.begin,
                x.size,
                x.stack_id,
                x.referenced_count,
                x.referenced_size,
                x.similar_count,
                x.similar_size,
                x.similar_referenced_count,
                x.similar_referenced_size,
            )
            for x in dedup(packed(records), limit)
        ]
        assert got == _model(records, limit), (stacks, limit)


def test_entries_add_up_to_the_folded_blocks():
    """The fold counts each block once (a leak, or under one leak's
    references): merged or not, every entry together counts each once."""
    rng = random.Random(11)
    addr, records = 0x10000, []
    for _ in range(500):
        addr += 64
        records.append((addr, 48, rng.randint(0, 3), rng.randint(0, 3) * 32, rng.randint(0, 20)))
    leaks = dedup(packed(records), limit=len(records))
    blocks = sum(
        1 + x.similar_count + x.referenced_count + x.similar_referenced_count for x in leaks
    )
    assert blocks == sum(1 + r[2] for r in records)
    assert sum(x.total_size for x in leaks) == sum(r[1] + r[3] for r in records)


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        _native.dedup(b"\x00" * (LEAK_RECORD_SIZE + 1), 10)
    with pytest.raises(ValueError):
        _native.dedup(b"", -1)
    assert _native.dedup(b"", 10) == []
