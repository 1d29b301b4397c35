"""The "stopped" snapshot strategy: the target itself, paused until the
sweep has read the memory it needs (sweep/mark.py, release=)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from unreachable.capture.stop_world import Capture, CaptureRequest, stop_world
from unreachable.capture.target import Target


@contextmanager
def capture(target: Target, request: CaptureRequest) -> Iterator[Capture]:
    with ExitStack() as cleanup:
        yield stop_world(target, request.roots, cleanup)
