"""Before a fork snapshot stops its target: the shim's helper free of what
a previous scan left it to end.

A scan's teardown goes on after the scan: the helper reaps a snapshot child
(its command word stays SNAPSHOT until then, polled every 1-20 ms), and
takes a write tracking down after its STOP (or after its scanner died). A
fork asked of the helper meanwhile (snapshot.c finish_previous) lets it run
alone until it is done: the rest of the target stays stopped that long, up
to 2 s, and the fork fails past that. So a fork scan waits for that end
first, with the target running, up to HELPER_FREE_S, and otherwise says
why it takes no child. A tracking that is ON for a live scanner (another
scan copying the process now) is no teardown: the helper forks beside it.
"""

from __future__ import annotations

import os
import time

from unreachable.capture.target import Target
from unreachable.capture.write_tracking import ON, START, STOP, ended, read_tracker
from unreachable.errors import ScanError
from unreachable.process.status import pid_namespace, read_status

# A snapshot child's reap takes 1-20 ms; a tracking's end by the helper,
# 2.5 s for a runtime's 8 TiB read-write reservation (8 MiB pieces).
HELPER_FREE_S = 5.0
_POLL_S = 0.002
_CMD_IDLE = 0  # abi.h UR_CMD_IDLE


def _scanner_gone(pid: int, scanner: int) -> bool:
    """Whether the scanner a tracking names (its pid in the target's pid
    namespace; 0: one outside it, known by its heartbeat) has exited."""
    if scanner <= 0 or pid_namespace(pid) != pid_namespace("self"):
        return False
    try:
        os.kill(scanner, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _busy(target: Target, mem: int) -> str:
    """What the helper is still ending ("" when nothing)."""
    header = target.header
    cmd = int.from_bytes(os.pread(mem, 4, header.helper_cmd), "little")
    if cmd != _CMD_IDLE:
        return "the shim's helper still holds a previous scan's snapshot child"
    if not header.write_tracker:
        return ""
    tracker = read_tracker(mem, header.write_tracker)
    if tracker["cmd"] == STOP or (
        tracker["cmd"] in (START, ON) and _scanner_gone(target.pid, tracker["scanner_pid"])
    ):
        return "the shim's helper is still taking down a previous scan's write tracking"
    return ""


def wait_helper_free(target: Target, timeout_s: float = HELPER_FREE_S) -> str:
    """Until the helper has ended what a previous scan left it, the target
    running meanwhile. "" once it has (or when that cannot be known, or the
    target is stopped by a signal: its helper runs only when let run alone,
    in the pause); else why not, as one line."""
    ended(target.pid)  # this process's own teardowns of it first
    try:
        if read_status(target.pid).state == "T":
            return ""
        mem = os.open(f"/proc/{target.pid}/mem", os.O_RDONLY)
    except (OSError, ScanError):
        return ""  # gone, or unreadable: the stop says what is wrong
    try:
        deadline = time.monotonic() + timeout_s
        while why := _busy(target, mem):
            if time.monotonic() >= deadline:
                return f"{why} after {timeout_s:.0f} s"
            time.sleep(_POLL_S)
        return ""
    except (OSError, ValueError):
        return ""
    finally:
        os.close(mem)
