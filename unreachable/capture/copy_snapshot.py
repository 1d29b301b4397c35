"""The copy snapshot: copy the target's memory while it runs, stop it, read
again only the pages it wrote since, let it go.

The shim's helper tracks the writes (write_tracking.py); the copy lives in
the scanner (native/scanner/page_sync.c). The pause is a walk of the page
tables plus the pages written during the copy, not the heap: docs/pause.md
has the numbers and the costs (the scanner holds a copy of the target's
writable memory, and the target takes one minor fault per page it writes
while the copy is made).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from unreachable import _native
from unreachable.capture.stop_world import Capture, CaptureRequest, stop_world
from unreachable.capture.target import Target
from unreachable.capture.write_tracking import TrackingUnavailable, tracked_writes
from unreachable.errors import TargetUnscannable
from unreachable.process.maps import SPECIAL, Mapping, read_maps

SYNC_ANON = 1  # page_sync.h UR_SYNC_ANON
MAX_THREADS = 4
# From here on a fork snapshot's page-table copy (~30 ms per GB on 4 KiB
# pages) pauses longer than a copy snapshot's stop (docs/pause.md).
COPY_FROM_BYTES = 256 << 20
# Beyond this many live allocations the scanner's own work on the copy (the
# registry, the index, ~0.4 us each, where a snapshot child does it beside
# the scanner) makes the whole scan 2x slower and more: auto forks.
COPY_MAX_ALLOCATIONS = 2_000_000


def _copied(m: Mapping) -> bool:
    # Whatever the sweep may read: allocations and roots lie in writable or
    # anonymous memory; read-only file mappings are never either.
    return m.readable and m.path not in SPECIAL and (m.writable or m.inode == 0)


def sync_ranges(mappings: Sequence[Mapping]) -> bytes:
    return _native.abi_encode_array(
        "ur_sync_range",
        [(m.start, m.end, SYNC_ANON if m.demand_zero else 0) for m in mappings if _copied(m)],
    )


def copy_pays_off(
    anonymous_bytes: int, allocations: int | None, copy_from: int = COPY_FROM_BYTES
) -> bool:
    """Whether "auto" should try a copy snapshot: a heap big enough for the
    fork's pause to pass the copy's, with few enough allocations for the
    scan not to take much longer (docs/pause.md). allocations None: the
    registry could not be read (stopping the target reports why)."""
    if anonymous_bytes < copy_from or allocations is None:
        return False
    return allocations <= COPY_MAX_ALLOCATIONS


def _threads() -> int:
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


@contextmanager
def copy_while_running(target: Target) -> Iterator[_native.MemoryCopy]:
    """Writes tracked and the memory copied, the target running; tracking
    ends with the block. Raises TrackingUnavailable when it cannot be done."""
    with tracked_writes(target):
        mappings = read_maps(target.pid)
        # Bounded, not sized: what the copy takes depends on the pages used,
        # not on the mappings (a sparse reservation takes nothing).
        copy = _native.MemoryCopy(target.pid)
        try:
            copy.sync(sync_ranges(mappings), threads=_threads())
        except MemoryError:
            copy.close()
            raise TrackingUnavailable(
                "the copy would take more memory than the scanner may (half of what is"
                " available, or of the room left in its own memory cgroup)"
            ) from None
        except OSError as e:
            copy.close()
            raise TrackingUnavailable(f"copying the target's memory failed: {e}") from None
        try:
            yield copy
        except BaseException:
            copy.close()
            raise


def refresh(copy: _native.MemoryCopy, pid: int) -> list[Mapping]:
    """The target stopped: bring the copy to this moment and finish it.
    Returns the maps it was brought up to. Raises OSError or MemoryError."""
    mappings = read_maps(pid)
    copy.reset_stats()
    copy.sync(sync_ranges(mappings), refresh=True, threads=_threads())
    copy.finish()
    return mappings


@contextmanager
def capture(target: Target, request: CaptureRequest) -> Iterator[Capture]:
    """The copy, made while the target runs, then brought up to date in the
    pause. A copy that cannot be made is refused (request.must) or raises
    TrackingUnavailable; one that cannot be brought up to date leaves the
    target stopped, swept so (it is stopped already)."""
    with ExitStack() as cleanup:
        tracking = cleanup.enter_context(ExitStack())
        try:
            copy = tracking.enter_context(copy_while_running(target))
        except TrackingUnavailable as e:
            if request.must:
                raise TargetUnscannable(f"{request.must}{e}") from None
            raise
        cleanup.callback(copy.close)
        capture = stop_world(target, request.roots, cleanup)
        try:
            capture.mappings = refresh(copy, target.pid)
            capture.tracer.release()
            capture.snapshot, capture.copy = "copy", copy
        except (OSError, MemoryError) as e:
            capture.snapshot_error = f"the copy could not be brought up to date: {e}"
        tracking.close()  # writes are not tracked a moment longer
        yield capture
