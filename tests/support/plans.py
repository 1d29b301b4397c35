"""Run a scan's capture stage as the scan would (facts, plan, each plan's
capture until one is had), for tests of the snapshot strategies."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from unreachable.capture.stop_world import Capture
from unreachable.scan.capture import capture
from unreachable.scan.facts import gather_facts
from unreachable.scan.options import ScanOptions
from unreachable.scan.plan import Retry, plan
from unreachable.scan.report import join_notes


@contextmanager
def first_capture(pid: int, snapshot: str = "auto", **facts: Any) -> Iterator[tuple[Capture, str]]:
    """The capture of the first plan that gets one, and the snapshot note
    the report would carry. facts: changes to the facts read (target=, a
    stale Target; anonymous_bytes= and allocations=, to move a threshold)."""
    options = ScanOptions(snapshot=snapshot)  # type: ignore[arg-type]
    read = replace(gather_facts(pid, options), **facts)
    assert read.target is not None
    retries: list[Retry] = []
    for planned in plan(read, options):
        # A concurrent mark has no capture of its own (its mark runs inside
        # it): the capture is the next plan's.
        if planned.snapshot == "concurrent" or any(r.skips(planned) for r in retries):
            continue
        with capture(read.target, read, planned) as held:
            if isinstance(held, Retry):
                retries.append(held)
                continue
            reasons = (r.reason for r in retries)
            yield held, join_notes(*reasons, planned.snapshot_note, held.snapshot_error)
            return
    raise AssertionError(f"no plan had a capture: {retries}")
