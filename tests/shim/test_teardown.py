"""The helper's own teardown of a write tracking costs what the tracked
memory holds, not the size of its mappings (native/shim/write_tracking.c)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.targets import TargetFactory
from tests.support.tracking import strace_for_tracking, wait_untracked
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import tracked_writes

RESERVATION = Path(__file__).parent.parent / "capture" / "programs" / "rw_reservation.c"
PIECE = 8 << 20  # write_protect.h UR_WALK_CHUNK


def wait_traced(tid: int, tracer: subprocess.Popen[bytes]) -> None:
    """Until strace has attached to tid (it says nothing when it has)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and tracer.poll() is None:
        with open(f"/proc/{tid}/status") as f:
            if f"TracerPid:\t{tracer.pid}\n" in f.read():
                return
        time.sleep(0.01)
    pytest.fail("strace did not attach to the helper")


def test_a_read_write_reservation_is_unregistered_in_few_calls(targets: TargetFactory) -> None:
    """A 64 GiB read-write reservation that the helper registered itself
    (mode 0) and never touched: its teardown unregistered it 8 MiB at a
    time, two ioctls a piece (16,384 here; MariaDB's 8 TiB took 2.5 s).
    Now each stretch without pages is one call. Counted with strace on
    the helper thread, from the tracking's end to the helper's IDLE."""
    strace = strace_for_tracking("helper's")
    target = targets.start(RESERVATION, "64")
    reserved = target.int("reserved")
    opened = open_target(target.pid)
    with tracked_writes(opened, mode=0, arm_here=False):
        log = Path(f"/tmp/ur-teardown-{target.pid}.strace")
        tracer = subprocess.Popen(
            [
                strace,
                "-qq",
                "-e",
                "trace=ioctl",
                "-o",
                str(log),
                "-p",
                str(opened.header.helper_tid),
            ],
            stderr=subprocess.DEVNULL,
        )
        wait_traced(opened.header.helper_tid, tracer)
    try:
        wait_untracked(target.pid, timeout=120)
    finally:
        tracer.terminate()
        tracer.wait()
    calls = log.read_text().splitlines()
    log.unlink()
    unregisters = [line for line in calls if "UFFDIO_UNREGISTER" in line]
    assert unregisters, calls[:5]
    assert len(unregisters) < reserved // PIECE // 8, (len(unregisters), reserved // PIECE)
    assert target.alive()
