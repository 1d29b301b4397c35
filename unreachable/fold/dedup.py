"""Merge leaks with identical backtraces into one entry, as libmemunreachable does.

Leaks are taken in address order; the first leak of each backtrace keeps its
own address and size and absorbs the others into its similar_* fields. Leaks
without a backtrace are never merged. The result is sorted by total size
(largest first, then by address) and cut to `limit`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from unreachable.sweep.child import LEAK_RECORD


@dataclass(slots=True)
class Leak:
    begin: int
    size: int
    stack_id: int
    referenced_count: int = 0
    referenced_size: int = 0
    similar_count: int = 0
    similar_size: int = 0
    similar_referenced_count: int = 0
    similar_referenced_size: int = 0

    @property
    def total_size(self) -> int:
        return self.size + self.referenced_size + self.similar_size + self.similar_referenced_size


def dedup(leaks: bytes | memoryview, limit: int) -> list[Leak]:
    """leaks: packed LEAK_RECORDs in address order (sweep.mark.SweepResult.leaks)."""
    if limit <= 0:
        return []
    by_stack: dict[int, Leak] = {}
    # Leaks without a backtrace can be millions: keep only the `limit` largest
    # in a min-heap keyed (total, -address) instead of building them all.
    plain: list[tuple[int, int, int, int, int]] = []
    for begin, size, ref_count, ref_size, stack_id, _ in LEAK_RECORD.iter_unpack(leaks):
        if stack_id:
            first = by_stack.get(stack_id)
            if first is None:
                by_stack[stack_id] = Leak(begin, size, stack_id, ref_count, ref_size)
            else:
                first.similar_count += 1
                first.similar_size += size
                first.similar_referenced_count += ref_count
                first.similar_referenced_size += ref_size
            continue
        key = (size + ref_size, -begin, size, ref_count, ref_size)
        if len(plain) < limit:
            heapq.heappush(plain, key)
        elif key > plain[0]:
            heapq.heapreplace(plain, key)
    out = list(by_stack.values())
    out += [Leak(-neg_begin, size, 0, rc, rs) for _, neg_begin, size, rc, rs in plain]
    out.sort(key=lambda leak: (-leak.total_size, leak.begin))
    return out[:limit]
