"""The shim's snapshot strategies, by name: each a module whose
capture(target, request) holds the target's memory still and yields the
Capture the later stages read. scan/capture.py's CAPTURES lists them with
the strategies of processes without the shim and of core files."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from unreachable.capture import copy_snapshot, fork_snapshot, stopped
from unreachable.capture.stop_world import Capture, CaptureRequest
from unreachable.capture.target import Target

Strategy = Callable[[Target, CaptureRequest], AbstractContextManager[Capture]]

STRATEGIES: dict[str, Strategy] = {
    "fork": fork_snapshot.capture,
    "copy": copy_snapshot.capture,
    "stopped": stopped.capture,
}


def take_snapshot(target: Target, request: CaptureRequest) -> AbstractContextManager[Capture]:
    return STRATEGIES[request.snapshot](target, request)
