"""A thread that ended inside realloc without running its destructors (the
raw exit system call from a signal handler) leaves its slot announcing the
call: the scanner reads that slot as naming nothing in flight
(unreachable/allocations/registry.py settle_gone_threads)."""

from __future__ import annotations

from pathlib import Path

from tests.support.plans import first_capture
from unreachable.allocations.source import ShimRegistry
from unreachable.capture.target import open_target

PROGRAM = Path(__file__).parent.parent / "shim" / "programs" / "exit_in_realloc.c"
INCLUDE = Path(__file__).parent.parent / "shim" / "programs"


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
