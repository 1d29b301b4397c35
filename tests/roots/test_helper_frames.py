"""The shim's helper thread holds the shim's values only (arena ranges it
collapses, size-map pages): words on its stack below its frames and in its
registers are no roots (roots/classify.stack_sps, sources.registers), or a
leaked block one of them falls in would be hidden."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

from tests.support.targets import wait_for_helper
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
# Inside the red zone below the blocked helper's SP, which a scan reads for
# every other thread (a leaf function may keep data there).
BELOW_SP = 64
MASK = 0xA5A5A5A5A5A5A5A5  # the program's (helper_residue.c)


def _blocked_sp(pid: int, tid: int) -> int | None:
    """The helper's SP while it sleeps in a system call, else None."""
    fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
    return int(fields[-2], 16) if len(fields) == 9 else None


def _word(fd: int, at: int) -> int:
    return struct.unpack("<Q", os.pread(fd, 8, at))[0]


def test_words_below_the_helpers_frames_keep_nothing(targets):
    target = targets.start(PROGRAMS / "helper_residue.c")
    leaked = target.int("masked") ^ MASK
    tid = wait_for_helper(target.pid)
    fd = os.open(f"/proc/{target.pid}/mem", os.O_RDWR)
    try:
        # The helper wakes every few seconds and its calls then overwrite the
        # word: a trial counts only if the word is still there after the scan.
        for _ in range(20):
            sp = _blocked_sp(target.pid, tid)
            if sp is None:
                time.sleep(0.05)
                continue
            os.pwrite(fd, struct.pack("<Q", leaked + 16), sp - BELOW_SP)
            report = scan(target.pid, ScanOptions(snapshot="stopped"))
            if _word(fd, sp - BELOW_SP) == leaked + 16 and _blocked_sp(target.pid, tid) == sp:
                break
        else:
            raise AssertionError("the helper never stayed asleep through a scan")
    finally:
        os.close(fd)
    assert (report.leak_count, report.leak_bytes) == (1, 4000)
    assert target.alive() and target.tracer() == 0
