"""Merge leaks with identical backtraces into one entry, as libmemunreachable does.

Leaks are taken in address order; the first leak of each backtrace keeps its
own address and size and absorbs the others into its similar_* fields. Leaks
without a backtrace are never merged here (fold/types.py folds them by size
and C++ type). The result is sorted by total size
(largest first, then by address) and cut to `limit`. The loop is native
(native/scanner/leak_dedup.c): a heap can leak millions of blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from unreachable import _native


@dataclass(slots=True, eq=False, repr=False)
class Leak:  # fields in the order of native/scanner/leak_dedup.h struct ur_dedup_leak
    """One report entry as the fold made it."""

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
    """leaks: packed abi.h ur_leak_records in address order (sweep.mark.SweepResult.leaks)."""
    if limit <= 0:
        return []
    return [Leak(*fields) for fields in _native.dedup(leaks, limit)]
