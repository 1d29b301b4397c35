"""Pause the target for as short a time as possible.

All threads are stopped with PTRACE_SEIZE + PTRACE_INTERRUPT and their
registers read. Then, when the shim's helper thread is there and its seccomp
filters (if any) provably let its clone() through, the helper forks a
copy-on-write child that stays frozen under ptrace; the target is released at
once and the sweep reads the child. In "copy" mode the scanner copies the
memory while the target runs and, stopped, reads again only what it wrote
since (copy_snapshot.py); "auto" does so when the heap is big enough for the
fork's page-table copy to cost more, and the allocations few enough for the
scan not to take much longer; and "auto" takes no snapshot child when the
target's memory cgroup has too little room left for one (the child is
charged to it, process/cgroup_memory.py). Otherwise ("stopped" mode) the target
stays paused while the scanner copies the memory the sweep needs
(sweep/mark.py, release=). The pause therefore costs a page-table copy, a
page-table walk plus the pages written, or a heap copy, never the mark
(docs/pause.md has the numbers).

Every exit path releases the target: the native Session detaches on close, on
garbage collection, and the kernel detaches it if this process dies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Literal

from unreachable import _native
from unreachable.capture.copy_snapshot import (
    COPY_FROM_BYTES,
    NEVER_COPY,
    copy_pays_off,
    copy_while_running,
    refresh,
)
from unreachable.capture.kept_out_of_fork import ForkFlags, KeptOut, fork_flags, read_kept_out
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.target import Target, current_helper_tid, still_running
from unreachable.capture.write_tracking import TrackingUnavailable
from unreachable.errors import TargetNotFound, TargetPermissionDenied, TargetUnscannable
from unreachable.process.access import why_denied
from unreachable.process.cgroup_memory import memory_headroom, no_room_for_fork, oom_victim_first
from unreachable.process.maps import Mapping, parse_maps, read_maps_text
from unreachable.process.memory import Memory
from unreachable.process.status import resident_anonymous_bytes, thread_seccomp

SnapshotMode = Literal["auto", "fork", "copy", "stopped", "concurrent"]


@dataclass(frozen=True, slots=True)
class CapturedThread:
    tid: int
    sp: int
    regs: bytes
    xstate: bytes


@dataclass(slots=True)
class Capture:
    session: _native.Session
    threads: list[CapturedThread]
    snapshot: str  # "fork", "copy" or "stopped"
    snapshot_error: str = ""  # why it is not the snapshot asked for (or auto's first choice)
    copy: _native.MemoryCopy | None = None  # "copy": the memory as it was when stopped
    # "copy": the maps of that moment; "fork": the frozen child's
    mappings: list[Mapping] = field(default_factory=list)
    # "fork": what the child lacks of the target, read while it was stopped
    kept_out: KeptOut = field(default_factory=KeptOut)
    # pointers the kernel holds for the target (read in or around the pause)
    kernel_held: KernelHeld | None = None
    headroom: int | None = None  # what the target's memory cgroup could still be charged

    @property
    def mem_pid(self) -> int:
        return self.session.mem_pid

    @property
    def memory(self) -> Memory:
        """Where the scan reads: the copy, or the stopped target / frozen child."""
        return self.copy if self.copy is not None else self.session.mem_pid

    @property
    def pause_ms(self) -> float:
        return self.session.pause_ns / 1e6


def stop_error(pid: int, e: OSError) -> Exception:
    """The scan's error for a failed stop (ptrace attach or interrupt) of pid."""
    if isinstance(e, ProcessLookupError) or not still_running(pid):
        return TargetNotFound(f"process {pid} exited before or during the scan")
    if isinstance(e, PermissionError):
        return TargetPermissionDenied(f"cannot stop pid {pid}: {why_denied(pid)}")
    return TargetUnscannable(f"cannot stop pid {pid}: {e}")


def _clone_verdict(session: _native.Session, pid: int, helper_tid: int) -> bool | None:
    """Whether the helper's snapshot clone() gets past its seccomp filters:
    True, False (a filter would kill, trap or hold it), or None (they cannot
    be read: reading them takes CAP_SYS_ADMIN)."""
    mode = thread_seccomp(pid, helper_tid)
    if mode == 0:
        return True
    if mode == 1:
        return False  # strict mode: read, write, exit and sigreturn only
    try:
        return session.seccomp_allows_clone(helper_tid)
    except OSError:
        return None


@contextmanager
def stop_world(
    target: Target,
    mode: SnapshotMode,
    copy_from: int = COPY_FROM_BYTES,
    no_fork: str = "",
    roots: bool = True,
    needs_fork: bool = False,
) -> Iterator[Capture]:
    """copy_from: the anonymous memory in use from which "auto" may try a
    copy snapshot (copy_snapshot.copy_pays_off). no_fork: why "auto" must
    not take a snapshot child this time (the report's snapshot_note).
    roots=False: the caller reads no roots (a heap dump), so neither the
    wiped memory nor the pointers the kernel holds are looked for.
    needs_fork: the caller can use nothing but a snapshot child (an
    in-child sweep): what is known before the stop to rule one out is
    refused then."""
    pid = target.pid
    headroom = memory_headroom(pid)
    helper_tid, helper_cmd = target.header.helper_tid, target.header.helper_cmd
    session = _native.Session(pid)
    with ExitStack() as cleanup:
        cleanup.callback(session.close)
        tracking = cleanup.enter_context(ExitStack())
        copy: _native.MemoryCopy | None = None
        copy_error = ""
        wants_copy = mode == "copy" or (mode == "auto" and copy_pays_off(target, copy_from))
        # Off the pause: smaps walks every page table. With more memory kept
        # out of forks than a fork's pause reads quickly, "auto" takes a copy
        # whatever the heap's size (node's V8 heap: stopped, it paused 26-157
        # ms; a copy, 4 ms). Failing that it still forks: stopped reads that
        # memory in its pause too, and the rest of the heap besides. No child
        # only when there is more of it than the scanner may hold.
        left_out = ForkFlags()
        if roots and not wants_copy and mode in ("auto", "fork"):
            left_out = fork_flags(pid)
        if mode == "auto" and copy_from != NEVER_COPY and left_out.prefers_copy:
            wants_copy = copy_pays_off(target, 0)
        if wants_copy:
            try:
                copy = tracking.enter_context(copy_while_running(target))
                cleanup.callback(copy.close)
                left_out = ForkFlags()
            except TrackingUnavailable as e:
                if mode == "copy":
                    raise TargetUnscannable(f"no copy snapshot: {e}") from None
                copy_error = f"no copy snapshot: {e}"
        if copy is None and left_out.too_big:
            why = (
                f"the target keeps {left_out.resident >> 20} MiB out of forks"
                " (MADV_DONTFORK or MADV_WIPEONFORK), more than this scanner may hold"
            )
            # Refused before a pause that could not be used.
            if mode == "fork":
                raise TargetUnscannable(f"{why}; scan it with --snapshot stopped or copy")
            if needs_fork:
                raise TargetUnscannable(f"no in-child sweep without a snapshot child: {why}")
            no_fork = no_fork or why
        elif copy is None:
            left_out.make_room()
        # Finding the epoll descriptors takes a readlink per descriptor.
        kernel_held = KernelHeld.before_stop(pid) if roots else None
        if kernel_held:
            cleanup.callback(kernel_held.close)
        try:
            threads = [CapturedThread(*t) for t in session.stop()]
        except OSError as e:
            raise stop_error(pid, e) from None
        capture = Capture(session, threads, "stopped", headroom=headroom)
        if kernel_held:
            kernel_held.read_in_pause()
            kernel_held.signals = session.pending_signal_values()
        capture.kernel_held = kernel_held
        if copy is not None:
            try:
                capture.mappings = refresh(copy, pid)
                session.release()
                capture.snapshot, capture.copy = "copy", copy
            except (OSError, MemoryError) as e:
                # Still stopped: swept in place instead, as "stopped" would.
                capture.snapshot_error = f"the copy could not be brought up to date: {e}"
            tracking.close()  # writes are not tracked a moment longer
            yield capture
            return
        clone_ok: bool | None = None
        stopped_tids = {t.tid for t in threads}
        if mode != "stopped" and helper_tid not in stopped_tids:
            helper_tid = current_helper_tid(target)  # replaced since it was read
        helper_stopped = helper_tid in stopped_tids
        if mode != "stopped":
            if not helper_tid:
                capture.snapshot_error = "the shim's snapshot helper thread is not running"
            elif not helper_stopped:
                capture.snapshot_error = "the shim's snapshot helper thread ended before the stop"
            elif (clone_ok := _clone_verdict(session, pid, helper_tid)) is False:
                capture.snapshot_error = (
                    "the target's seccomp filter does not provably allow the helper's clone()"
                )
            elif clone_ok is None:
                capture.snapshot_error = (
                    "the target has a seccomp filter and reading it takes CAP_SYS_ADMIN"
                )
        no_room = ""
        if mode == "auto" and clone_ok:
            no_room = no_fork or no_room_for_fork(headroom, resident_anonymous_bytes(pid))
        if no_room:
            capture.snapshot_error = f"{copy_error}; {no_room}" if copy_error else no_room
        if mode == "fork" or (mode == "auto" and clone_ok and not no_room):
            # Never asked of the helper when its filter would kill the target.
            if helper_stopped and clone_ok is not False:
                try:
                    child = session.snapshot(helper_tid, helper_cmd)
                    child_maps = read_maps_text(child)
                    capture.kept_out = read_kept_out(pid, read_maps_text(pid), child_maps, left_out)
                    session.release()
                    # Still frozen: it has run nothing, and its maps are as read.
                    capture.mappings = parse_maps(child_maps)
                    oom_victim_first(session.snapshot_pid)
                    capture.snapshot, capture.snapshot_error = "fork", copy_error
                except OSError as e:
                    capture.snapshot_error = e.strerror or str(e)
            if mode == "fork" and capture.snapshot != "fork":
                raise TargetUnscannable(f"snapshot failed: {capture.snapshot_error}")
        yield capture
