"""What a scan found, independent of how it is printed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from unreachable.model.wire import wire
from unreachable.symbolize.frame import Frame

if TYPE_CHECKING:
    from unreachable.triage.baseline import Comparison
    from unreachable.triage.suppressions import Suppressed

# The counts every leak entry carries, by the same names in the fold, this
# model, the JSON schema and the proto.
LEAK_COUNTS = (
    "size",
    "referenced_count",
    "referenced_size",
    "similar_count",
    "similar_size",
    "similar_referenced_count",
    "similar_referenced_size",
    "total_size",
)


def leak_counts(source: Any) -> dict[str, int]:
    """LEAK_COUNTS read off anything that has them as attributes."""
    return {name: int(getattr(source, name)) for name in LEAK_COUNTS}


@dataclass(slots=True)
class LeakEntry:
    """One reported leak: its block, what it references, and its similar leaks."""

    address: int
    size: int
    referenced_count: int
    referenced_size: int
    similar_count: int
    similar_size: int
    similar_referenced_count: int
    similar_referenced_size: int
    total_size: int
    # first <= 32 bytes, only when asked for
    contents: bytes | None = field(default=None, metadata=wire(json="contents_hex"))
    backtrace: list[Frame] = field(default_factory=list)
    type: str = ""  # C++ class of the first block, from its vptr (fold/types.py); "" unknown


@dataclass(slots=True)
class ScanReport:
    """A scan's result, whatever format prints it."""

    pid: int
    command: str
    leak_count: int  # every unreachable allocation, not only the reported entries
    leak_bytes: int
    allocation_count: int
    allocation_bytes: int
    pause_ms: float = field(metadata=wire(json_digits=3))
    scan_ms: float = field(metadata=wire(json_digits=3))
    # "fork": frozen copy-on-write child; "copy": copied while running, then
    # brought up to date while paused; "stopped": swept while paused;
    # "concurrent": marked while running, between two short stops
    snapshot: str
    threads: int
    leaks: list[LeakEntry]
    # The part of the pause after its last thread stopped: the scan's own work
    # in it. pause_ms less hold_ms is the threads reaching the stop
    # (docs/pause.md, "What the stops hold").
    hold_ms: float = field(default=0.0, metadata=wire(json_digits=3))
    # bytes per root/skip class; over gRPC a RootBytes(kind, bytes) each
    roots: dict[str, int] = field(
        default_factory=dict, metadata=wire(proto_pairs=("kind", "bytes"))
    )
    pages_skipped: int = 0
    bytes_scanned: int = 0
    # Where the allocations came from: "shim registry" (requested sizes,
    # backtraces) or "glibc heap" (a process without the shim: chunk usable
    # sizes, no backtraces; docs/glibc-heap.md).
    allocations: str = "shim registry"
    # Where the mark ran: "child" (the snapshot child swept its own memory) or
    # "scanner" (this process read the target or child through /proc).
    sweep: str = "scanner"
    sweep_note: str = ""  # why a fork snapshot was not swept in the child, if it was meant to be
    mark_threads: int = 1  # threads that marked (in the child: at most the target's CPUs)
    # Passes over the blocks a partial reference graph left out (a heap dense
    # in pointers, read again in address order; 0 when the graph was whole),
    # and the bytes the mark's readers loaded (0 when the child marked itself).
    mark_passes: int = 0
    mark_bytes_read: int = 0
    snapshot_note: str = ""  # why the scan fell back to this snapshot, if it did
    symbol_note: str = ""  # frames left unsymbolized (time budget) or files not read, and why
    # Set when suppressions were given: what they took out of leaks and the
    # totals (unreachable.triage.suppressions).
    suppressed: Suppressed | None = field(default=None, metadata=wire(codec="suppressed"))
    # Set with --baseline: leaks and totals then count only what is new or
    # grew since the baseline (unreachable.triage.baseline).
    baseline: Comparison | None = field(default=None, metadata=wire(codec="baseline"))


# The stack the exports (pprof, collapsed, diff) give to leaks no listed entry
# accounts for: entries past --limit, or blocks the fold counted nowhere else.
UNLISTED = "[leaks in no listed entry]"


@dataclass(slots=True, eq=False, repr=False)
class Weights:
    """What the exports count for each entry, and the rest of the totals."""

    entries: list[tuple[int, int]]  # (allocations, bytes) per entry, in the entries' order
    unlisted_count: int
    unlisted_bytes: int


def export_weights(leaks: list[dict[str, int]], leak_count: int, leak_bytes: int) -> Weights:
    """Weigh each entry (leak_counts() of it) so the weights add up to the
    report's totals exactly: its own blocks and its similar leaks', plus the
    blocks they reference. The fold counts every unreachable block once,
    under one leak (native/mark/leak_folding.h), so these are the entries'
    total_size and their blocks, and what no listed entry accounts for
    (entries past --limit) is left unlisted. A report whose references add
    up to more than its totals (made by a fold that counted a block under
    every root reaching it) is kept to them: the entries take their
    referenced blocks in list order while any are left."""
    own = [(1 + d["similar_count"], d["size"] + d["similar_size"]) for d in leaks]
    left_count = max(leak_count - sum(c for c, _ in own), 0)
    left_bytes = max(leak_bytes - sum(b for _, b in own), 0)
    entries = list(own)
    for i, d in enumerate(leaks):
        ref_count = min(d["referenced_count"] + d["similar_referenced_count"], left_count)
        ref_bytes = min(d["referenced_size"] + d["similar_referenced_size"], left_bytes)
        left_count -= ref_count
        left_bytes -= ref_bytes
        entries[i] = (own[i][0] + ref_count, own[i][1] + ref_bytes)
    return Weights(entries, left_count, left_bytes)


def report_weights(report: ScanReport) -> Weights:
    return export_weights(
        [leak_counts(leak) for leak in report.leaks], report.leak_count, report.leak_bytes
    )
