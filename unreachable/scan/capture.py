"""Stage capture: hold the target's memory still by the plan's snapshot
strategy, or say why the next plan must be tried.

Each strategy hands the later stages a Captured (scan/captured.py): the
memory, the process it is of, and the source of its allocations. The
shim's (capture/strategies.py: fork, copy, stopped) read the shim's
registry; the injected fork of a process without the shim
(scan/glibc_fork.py) and its whole copy (scan/glibc.py) walk glibc's
heap; a core file (scan/core.py) is its own snapshot, with either source.
A new strategy is a module and its line in CAPTURES."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager

from unreachable.allocations.source import SOURCES
from unreachable.capture.stop_world import Capture, CaptureRequest
from unreachable.capture.strategies import take_snapshot
from unreachable.capture.target import Target
from unreachable.capture.write_tracking import TrackingUnavailable
from unreachable.scan.captured import Captured
from unreachable.scan.facts import Facts
from unreachable.scan.plan import RETRY_ELSEWHERE, Plan, Retry
from unreachable.sweep.child import mark_threads_beside

CaptureStage = Callable[[Facts, Plan], AbstractContextManager[Captured | Retry]]


@contextmanager
def capture(target: Target, facts: Facts, plan: Plan) -> Iterator[Capture | Retry]:
    """A shim strategy's capture, released when the block ends; or
    Retry: a copy that could not be made, a fork that lacks more than this
    scanner may hold (known only once the child exists)."""
    assert plan.snapshot in ("fork", "copy", "stopped")
    request = CaptureRequest(plan.snapshot, plan.must, facts.kept_out, plan.unread_filter_ok)
    if plan.snapshot == "copy":
        # Its end beside the rest of the scan only where a second core is free.
        helper = target.header.helper_tid
        request.teardown_beside = mark_threads_beside(target.pid, (helper,), facts.busy_threads) > 1
    with ExitStack() as held:
        try:
            got = held.enter_context(take_snapshot(target, request))
        except TrackingUnavailable as e:
            yield Retry(f"no copy snapshot: {e}", "copy", "snapshot")
            return
        if got.snapshot == "fork" and got.kept_out.too_big:
            yield Retry(got.kept_out.too_big, "fork", "snapshot", RETRY_ELSEWHERE)
            return
        if not got.tracer.released:
            got.tracer.calm()  # swept stopped: no longer a short stop
        yield got


@contextmanager
def _under_shim(facts: Facts, plan: Plan) -> Iterator[Captured | Retry]:
    target = facts.target
    assert target is not None
    source = SOURCES[plan.allocations](facts)
    with capture(target, facts, plan) as held:
        yield held if isinstance(held, Retry) else Captured(held, target, source)


# The strategies without the shim are imported when a plan names them: a
# scan's imports are part of its time, and a scan under the shim never
# walks glibc's heap or reads a core.
def _injected_fork(facts: Facts, plan: Plan) -> AbstractContextManager[Captured | Retry]:
    from unreachable.scan.glibc_fork import injected_fork

    return injected_fork(facts, plan)


def _whole_copy(facts: Facts, plan: Plan) -> AbstractContextManager[Captured | Retry]:
    from unreachable.scan.glibc import whole_copy

    return whole_copy(facts, plan)


def _core(facts: Facts, plan: Plan) -> AbstractContextManager[Captured | Retry]:
    from unreachable.scan.core import capture_core

    return capture_core(facts, plan)


# The snapshot strategies a plan may name (plan.Snapshot), each with what
# it needs of the facts. "concurrent" is none: its mark runs inside its
# capture (scan/run.py run_concurrent).
CAPTURES: dict[str, CaptureStage] = {
    "fork": _under_shim,
    "copy": _under_shim,
    "stopped": _under_shim,
    "injected fork": _injected_fork,
    "whole copy": _whole_copy,
    "core": _core,
}


def capture_for(facts: Facts, plan: Plan) -> AbstractContextManager[Captured | Retry]:
    """The plan's capture, released when the block ends."""
    return CAPTURES[plan.snapshot](facts, plan)
