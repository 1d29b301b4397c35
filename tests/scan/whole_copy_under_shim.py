"""A test-only snapshot strategy: the whole writable memory of a process
under the shim, copied while every thread is stopped, then the process let
go. It shows the seam (unreachable/scan/capture.py CAPTURES): this module,
and its line there, are all a new strategy takes; the stages after capture
read what it hands them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from unreachable import _native
from unreachable.allocations.source import SOURCES
from unreachable.capture.copy_snapshot import sync_ranges
from unreachable.capture.stop_world import stop_world
from unreachable.process.maps import read_maps
from unreachable.scan.captured import Captured
from unreachable.scan.facts import Facts
from unreachable.scan.plan import Plan, Retry

NAME = "whole copy under the shim"


@contextmanager
def whole_copy_under_shim(facts: Facts, plan: Plan) -> Iterator[Captured | Retry]:
    target = facts.target
    assert target is not None
    with ExitStack() as cleanup:
        held = stop_world(target, True, cleanup)
        copy = _native.MemoryCopy(target.pid)
        cleanup.callback(copy.close)
        held.mappings = read_maps(target.pid)
        copy.sync(sync_ranges(held.mappings), threads=1)
        copy.finish()
        held.tracer.release()
        held.snapshot, held.copy = NAME, copy
        yield Captured(held, target, SOURCES[plan.allocations](facts))
