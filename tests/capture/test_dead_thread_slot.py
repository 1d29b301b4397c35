"""A thread that ended inside realloc without running its destructors (the
raw exit system call from a signal handler) leaves its slot announcing the
call: the scanner reads that slot as naming nothing in flight
(unreachable/allocations/registry.py settle_gone_threads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.plans import first_capture
from tests.support.tracking import copy_unsupported
from unreachable.allocations.registry import read_registry
from unreachable.allocations.source import ShimRegistry
from unreachable.capture.target import open_target
from unreachable.process.maps import read_maps
from unreachable.scan.concurrent import _read_registry, _registry_copy, _registry_spans, _stop

PROGRAM = Path(__file__).parent.parent / "shim" / "programs" / "exit_in_realloc.c"
INCLUDE = Path(__file__).parent.parent / "shim" / "programs"

needs_tracking = pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())


def test_a_thread_gone_inside_realloc_names_no_block_in_flight(targets) -> None:
    """Its blocks are the program's again, to be reported if nothing holds
    them; they were roots for every scan, for good."""
    target = targets.start(PROGRAM, "raw", cflags=[f"-I{INCLUDE}"])
    dead = target.int("tid")
    shim = ShimRegistry(open_target(target.pid).shim.descriptor_addr)
    with first_capture(target.pid, "fork") as (capture, _):
        registry = shim.registry(capture.memory, capture.mappings, capture.threads)
    slot = next(t for t in registry.threads if t.tid == dead)
    assert slot.inflight_blocks() == []
    # The slot itself still says realloc: only the scanner knows the thread is gone.
    assert dead not in {t.tid for t in capture.threads}


@needs_tracking
def test_the_concurrent_scan_reads_a_thread_gone_inside_realloc_as_naming_nothing(targets) -> None:
    """The concurrent mark reads its own copy of the registry at each stop:
    read there, the dead thread's slot still named its blocks in flight,
    roots of every concurrent scan and never candidates."""
    target = targets.start(PROGRAM, "raw", cflags=[f"-I{INCLUDE}"])
    dead = target.int("tid")
    addr = open_target(target.pid).shim.descriptor_addr
    copy = _registry_copy(target.pid, _registry_spans(target.pid, addr, read_maps(target.pid)))
    try:
        session, live, _ = _stop(target.pid, {})
        session.release()
        session.close()
        copy.finish()
        raw = read_registry(copy, addr)
        settled = _read_registry(copy, addr, live)
    finally:
        copy.close()
    assert dead not in {t.tid for t in live}
    assert next(t for t in raw.threads if t.tid == dead).inflight_blocks() != []
    assert next(t for t in settled.threads if t.tid == dead).inflight_blocks() == []
