"""Folded stacks ("collapsed" format) for flamegraph.pl, speedscope and inferno.

One line per distinct stack: frames from the outermost caller to the
allocating frame, joined by ';', then a space and the weight (bytes by
default). Identical stacks are merged; lines are sorted for stable output.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from unreachable.model.report import UNLISTED, report_weights
from unreachable.symbolize.frame import Frame

Weight = Literal["bytes", "count"]
# (frames innermost first, as backtraces are stored; allocation count; bytes)
Sample = tuple[Sequence[Frame], int, int]
UNLISTED_FRAME = Frame(0, "", 0, UNLISTED, 0)


def frame_label(f: Frame) -> str:
    """The function, else map+0xrel_pc, else 0xpc; never containing ';' or a newline."""
    if f.function:
        label = f.function
    elif f.map:
        label = f"{os.path.basename(f.map)}+0x{f.rel_pc:x}"
    else:
        label = f"0x{f.pc:x}"
    return label.replace(";", ":").replace("\n", " ")


def samples_to_collapsed(samples: Iterable[Sample], weight: Weight = "bytes") -> str:
    folded: dict[str, int] = {}
    for frames, count, size in samples:
        value = size if weight == "bytes" else count
        if value <= 0:
            continue
        stack = ";".join(frame_label(f) for f in reversed(frames)) or "[no backtrace]"
        folded[stack] = folded.get(stack, 0) + value
    return "".join(f"{stack} {value}\n" for stack, value in sorted(folded.items()))


def report_samples(report: Any) -> list[Sample]:
    """A ScanReport's leak entries as samples, each under its root's stack with
    its similar leaks and the blocks they reference; they add up to the
    report's totals (model.report.export_weights), what no entry lists under
    a stack of its own (UNLISTED)."""
    weights = report_weights(report)
    samples: list[Sample] = [
        (leak.backtrace, count, size)
        for leak, (count, size) in zip(report.leaks, weights.entries, strict=True)
    ]
    if weights.unlisted_count or weights.unlisted_bytes:
        samples.append(([UNLISTED_FRAME], weights.unlisted_count, weights.unlisted_bytes))
    return samples


def heap_samples(records: Iterable[Any]) -> list[Sample]:
    """Heap records (size, num_allocations, frames) as samples."""
    return [(r.frames, r.num_allocations, r.size * r.num_allocations) for r in records]


def report_to_collapsed(report: Any, weight: Weight = "bytes") -> str:
    """A ScanReport (unreachable.model.report) as folded stacks."""
    return samples_to_collapsed(report_samples(report), weight)


def heapdump_to_collapsed(dump: Any, weight: Weight = "bytes") -> str:
    """A live heap dump (unreachable.heapdump.model.HeapDump) as folded stacks."""
    return samples_to_collapsed(heap_samples(dump.records), weight)
