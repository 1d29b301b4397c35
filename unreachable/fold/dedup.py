"""Merge leaks with identical backtraces into one entry, as libmemunreachable does.

Leaks are taken in address order; the first leak of each backtrace keeps its
own address and size and absorbs the others into its similar_* fields. Leaks
without a backtrace are never merged. The result is sorted by total size.
"""

from __future__ import annotations

from dataclasses import dataclass

from unreachable.allocations.registry import Registry
from unreachable.sweep.mark import FoldedLeak


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


def dedup(folded: list[FoldedLeak], registry: Registry, limit: int) -> list[Leak]:
    by_stack: dict[int, Leak] = {}
    out: list[Leak] = []
    for f in sorted(folded, key=lambda f: registry.begin(f.index)):
        stack_id = registry.stack_ids[f.index]
        size = registry.size(f.index)
        first = by_stack.get(stack_id) if stack_id else None
        if first is None:
            leak = Leak(
                registry.begin(f.index), size, stack_id, f.referenced_count, f.referenced_size
            )
            out.append(leak)
            if stack_id:
                by_stack[stack_id] = leak
        else:
            first.similar_count += 1
            first.similar_size += size
            first.similar_referenced_count += f.referenced_count
            first.similar_referenced_size += f.referenced_size
    out.sort(key=lambda leak: (-leak.total_size, leak.begin))
    return out[:limit]
