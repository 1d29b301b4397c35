"""Stop every thread of the target, read their registers and what the
kernel holds for it: the first step of every snapshot strategy.

All threads are stopped with PTRACE_SEIZE + PTRACE_INTERRUPT and their
registers read; then the values the kernel holds for the target (epoll
data, timers, queued signals, bytes in pipes and sockets) are read while
nothing can change them. What happens next is the strategy's
(capture/strategies.py): a frozen snapshot child (fork_snapshot.py), a
copy brought up to date (copy_snapshot.py), or the target itself, left
stopped until the sweep has read what it needs (stopped.py). The pause
therefore costs a page-table copy, a page-table walk plus the pages
written, or a heap copy, never the mark (docs/pause.md has the numbers).

Every exit path releases the target: the native Session detaches on close, on
garbage collection, and the kernel detaches it if this process dies.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Literal

from unreachable import _native
from unreachable.capture.kept_out_of_fork import ForkFlags, KeptOut
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.target import Target, still_running
from unreachable.errors import TargetNotFound, TargetPermissionDenied, TargetUnscannable
from unreachable.process.access import why_denied
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory

SnapshotMode = Literal["auto", "fork", "copy", "stopped", "concurrent"]
Strategy = Literal["fork", "copy", "stopped"]


@dataclass(slots=True, eq=False, repr=False)
class CaptureRequest:
    """What a snapshot strategy is asked for."""

    snapshot: Strategy
    # Set: a snapshot that cannot be had is refused with this prefix. Empty:
    # a fork the helper cannot take leaves the target stopped, swept so;
    # a copy that cannot be made raises TrackingUnavailable for the caller.
    must: str = ""
    # A fork's: what smaps said, before the stop, it would lack.
    kept_out: ForkFlags = field(default_factory=ForkFlags)
    # A fork's: asked of the helper even when its seccomp filter cannot be
    # read (an explicit --snapshot fork; a filter that would kill never is).
    unread_filter_ok: bool = False
    # False: the caller reads no roots (a heap dump), so neither the memory
    # a fork lacks nor the pointers the kernel holds are looked for.
    roots: bool = True
    # A copy's: its end runs beside the rest of the scan (write_tracking.py
    # end_in_background); False where the target's busy threads leave the
    # scan a single core.
    teardown_beside: bool = True


@dataclass(slots=True, eq=False, repr=False)
class CapturedThread:
    """One thread's registers and stack pointer, read in the pause."""

    tid: int
    sp: int
    regs: bytes
    xstate: bytes


@dataclass(slots=True, eq=False, repr=False)
class Capture:
    """What the pause left to mark: the stopped session or snapshot, and the threads."""

    session: _native.Session | None  # None: nothing was stopped (a core file)
    threads: list[CapturedThread]
    snapshot: str  # "fork", "copy", "stopped" or "core"
    snapshot_error: str = ""  # why it is not the snapshot asked for
    copy: _native.MemoryCopy | None = None  # "copy": the memory as it was when stopped
    # "copy": the maps of that moment; "fork": the frozen child's
    mappings: list[Mapping] = field(default_factory=list)
    # "fork": what the child lacks of the target, read while it was stopped
    kept_out: KeptOut = field(default_factory=KeptOut)
    # pointers the kernel holds for the target (read in or around the pause)
    kernel_held: KernelHeld | None = None
    # A stop held by a process of the scanner's own, with no session here
    # (capture/stopper.py): the child it froze (where the scan reads; 0 for
    # the whole copy's), and the pause and hold it took.
    frozen_pid: int = 0
    stopper_pause_ns: int = 0
    stopper_hold_ns: int = 0

    @property
    def tracer(self) -> _native.Session:
        """The session that stopped a live process (every capture but a core's)."""
        assert self.session is not None
        return self.session

    @property
    def mem_pid(self) -> int:
        return self.frozen_pid or self.tracer.mem_pid

    @property
    def memory(self) -> Memory:
        """Where the scan reads: the copy (or core), or the stopped target / frozen child."""
        return self.copy if self.copy is not None else self.mem_pid

    @property
    def pause_ms(self) -> float:
        if self.session is None:
            return self.stopper_pause_ns / 1e6
        return self.session.pause_ns / 1e6

    @property
    def hold_ms(self) -> float:
        """The pause from its last thread stopped to the end of the release."""
        if self.session is None:
            return self.stopper_hold_ns / 1e6
        return hold_ms(self.session.timings)


def hold_ms(timings: dict[str, float]) -> float:
    """A stop's hold from Session.timings (ms from the first seize): its
    threads reaching the stop left out. 0.0 before the release."""
    released = timings.get("released", 0.0)
    return max(0.0, released - timings.get("last stopped", 0.0)) if released else 0.0


def stop_error(pid: int, e: OSError) -> Exception:
    """The scan's error for a failed stop (ptrace attach or interrupt) of pid."""
    if isinstance(e, ProcessLookupError) or not still_running(pid):
        return TargetNotFound(f"process {pid} exited before or during the scan")
    if isinstance(e, PermissionError):
        return TargetPermissionDenied(f"cannot stop pid {pid}: {why_denied(pid)}")
    return TargetUnscannable(f"cannot stop pid {pid}: {e}")


def stop_world(target: Target, roots: bool, cleanup: ExitStack, urgent: bool = False) -> Capture:
    """Every thread stopped (the session closed by cleanup), and, with
    roots, what the kernel holds for the target read in the pause. urgent:
    the stopping thread runs at realtime priority until the release, where
    the scanner may (Session.stop): for the short stops only, never for
    one that lasts as long as a copy of the heap."""
    pid = target.pid
    session = _native.Session(pid)
    cleanup.callback(session.close)
    # Finding the epoll descriptors takes a readlink per descriptor: before the stop.
    kernel_held = KernelHeld.before_stop(pid) if roots else None
    if kernel_held:
        cleanup.callback(kernel_held.close)
    try:
        threads = [CapturedThread(*t) for t in session.stop(urgent=urgent)]
    except OSError as e:
        raise stop_error(pid, e) from None
    if kernel_held:
        kernel_held.read_in_pause()
        kernel_held.signals = session.pending_signal_values()
    return Capture(session, threads, "stopped", kernel_held=kernel_held)
