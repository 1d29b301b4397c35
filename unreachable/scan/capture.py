"""Stage capture: hold the target's memory still by the plan's snapshot
strategy (capture/strategies.py), or say why the next plan must be tried."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from unreachable.capture.stop_world import Capture, CaptureRequest
from unreachable.capture.strategies import take_snapshot
from unreachable.capture.target import Target
from unreachable.capture.write_tracking import TrackingUnavailable
from unreachable.scan.facts import Facts
from unreachable.scan.plan import RETRY_ELSEWHERE, Plan, Retry


@contextmanager
def capture(target: Target, facts: Facts, plan: Plan) -> Iterator[Capture | Retry]:
    """The capture the later stages read, released when the block ends; or
    Retry: a copy that could not be made, a fork that lacks more than this
    scanner may hold (known only once the child exists)."""
    assert plan.snapshot in ("fork", "copy", "stopped")
    request = CaptureRequest(plan.snapshot, plan.must, facts.kept_out, plan.unread_filter_ok)
    with ExitStack() as held:
        try:
            got = held.enter_context(take_snapshot(target, request))
        except TrackingUnavailable as e:
            yield Retry(f"no copy snapshot: {e}", "copy", "snapshot")
            return
        if got.snapshot == "fork" and got.kept_out.too_big:
            yield Retry(got.kept_out.too_big, "fork", "snapshot", RETRY_ELSEWHERE)
            return
        yield got
