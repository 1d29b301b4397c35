"""What a scan is asked to do: the options every entry point (CLI, daemon,
retention) hands the scan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from unreachable.capture.stop_world import SnapshotMode

# Where a fork-mode scan sweeps: "auto" in the snapshot child with the outside
# sweep as fallback, "child" only there (fails otherwise), "scanner" outside.
SweepMode = Literal["auto", "child", "scanner"]
# Called with each stage's name as it ends ("captured", "allocations",
# "marked", "folded", "done").
Progress = Callable[[str], None]
CONTENTS_BYTES = 32


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """What the caller asks of a scan."""

    limit: int = 100
    contents: bool = False
    # Contents of the first N entries that have no backtrace (the text
    # report's default: a leak without a backtrace is known by its bytes).
    sample_contents: int = 0
    snapshot: SnapshotMode = "auto"
    sweep: SweepMode = "auto"
    mark_threads: int = 0  # the child's, or a frozen copy's in here; 0: default_mark_threads()
    # seconds symbolization may take (None: no limit; True: UNREACHABLE_SYMBOL_BUDGET or 30)
    symbol_budget: float | None | bool = True
    # The pause the target may feel, in ms (None: no budget): auto prefers
    # the snapshots expected to stay under it, and a scan that is expected
    # not to says so in snapshot_note (scan/plan.py).
    max_pause_ms: float | None = None
