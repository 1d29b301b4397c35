"""The snapshot of a process that runs without the shim, when it can be
had: a copy-on-write child made by injecting clone() into one of its
stopped threads (the "injected fork" plan; docs/glibc-heap.md, "The
snapshot"). The pause is the page-table copy and the read of what the
child lacks, not a copy of the heap.

capture: the stopper (capture/stopper.py, native/stopper) stops every
thread and runs those inside malloc out of it, as the whole copy does;
the pointers the kernel holds are read (each thread's sigaltstack asked
with an injected call, kernel_held.py), then one thread runs a raw
clone(CLONE_FILES, exit signal 0) from a syscall instruction of the
process's libc, its registers and signal mask put back as they were.
Still stopped, the process's memory the child lacks or has wiped
(MADV_DONTFORK, MADV_WIPEONFORK: smaps read before the stop says how much)
is read from it, as under the shim (capture/kept_out_of_fork.py): its
words are roots. Then the process is let go. The child never runs: it is read through
/proc/CHILD/mem (process_vm_readv would make the kernel copy each page it
reads), then killed and reaped by an injected wait4 in the target. glibc's
heap is walked over the child as over the whole copy (scan/glibc.py),
from a new stop while it is found mid-update.

When it cannot be had, the whole copy follows (scan/plan.py), and the
report's snapshot_note says why: a seccomp filter that could refuse or
kill the clone or the wait4 (or cannot be read), more memory kept out of
forks than the scanner may hold, a walk refused over a child that lacks
such memory (it may be glibc's own), no thread free to take the call, no
syscall instruction found, or the clone itself failed.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from unreachable.allocations.glibc_heap import GlibcLibc, find_libc, tls_offsets
from unreachable.capture.kept_out_of_fork import ForkFlags, KeptOut, describe, read_kept_out
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import Capture, CapturedThread, stop_error
from unreachable.capture.stopper import Stopper, kill_here, stopper_path
from unreachable.errors import TargetUnscannable
from unreachable.process.cgroup_memory import oom_victim_first
from unreachable.process.maps import Mapping, parse_maps, read_maps, read_maps_text
from unreachable.process.status import check_scannable
from unreachable.scan.captured import Captured
from unreachable.scan.facts import Facts
from unreachable.scan.glibc import RUN_OUT_ROUNDS, SnapshotLacksHeap, no_shim_captured, walked
from unreachable.scan.plan import Plan, Retry
from unreachable.scan.syscall_site import syscall_instruction

# Shares the descriptor table: the child holds no descriptor of its own, so
# a pipe or socket the target closes meanwhile is closed at once, not when
# the child dies. Exit signal 0 (the low byte): its death sends no SIGCHLD.
CLONE_FILES = 0x400


class NoInjectedFork(Exception):
    """Why this process gets the whole copy instead."""


@dataclass(slots=True)
class _Forked:
    stopper: Stopper
    threads: list[CapturedThread]
    mappings: list[Mapping]  # the child's: without what it lacks
    held: KernelHeld
    tls: list[tuple[int, int]]
    kept_out: KeptOut  # what the child lacks or has wiped, read from the target

    @property
    def memory(self) -> int:
        return self.stopper.child

    def close(self) -> None:
        child = self.stopper.child
        try:
            self.stopper.close()
        except OSError as e:
            raise TargetUnscannable(
                f"the snapshot child {child} could not be reaped by the target ({e.strerror}):"
                " it stays a zombie of it until the target exits"
            ) from None
        finally:
            self.held.close()


def _why_not() -> str:
    if not os.access(stopper_path(), os.X_OK):
        return f"{stopper_path()} is missing"
    return ""


def _lacks(got: _Forked) -> str:
    """What the child lacks or has wiped, for the note ("": nothing)."""
    return describe(got.kept_out.mappings) if got.kept_out.mappings else ""


def _read_in_pause(
    pid: int, child: int, target_maps: str, flags: ForkFlags
) -> tuple[list[Mapping], KeptOut]:
    """The child's mappings, and what it lacks or has wiped read from the
    target, still stopped. Raises NoInjectedFork when that is more than the
    scanner may hold."""
    try:
        child_maps = read_maps_text(child)
        kept = read_kept_out(pid, target_maps, child_maps, flags)
    except OSError as e:
        raise stop_error(pid, e) from None
    if kept.too_big:
        raise NoInjectedFork(kept.too_big)
    return parse_maps(child_maps), kept


def _stop_and_fork(pid: int, libc: GlibcLibc, ip: int, flags: ForkFlags) -> _Forked | str:
    """The frozen child of one stop, or why the stop was no good (a thread
    inside malloc). Raises NoInjectedFork when no child can be had. flags:
    what smaps said, before the stop, the child would lack."""
    held = KernelHeld.before_stop(pid)
    stopper = Stopper(pid, ip)
    done: _Forked | None = None
    try:
        try:
            got = stopper.stop(libc.malloc_code, RUN_OUT_ROUNDS, CLONE_FILES, True)
        except OSError as e:
            raise stop_error(pid, e) from None
        threads = [CapturedThread(*t) for t in got.threads]
        if got.left:
            stopper.release()
            return f"{got.left} thread(s) stayed inside malloc"
        if not got.inject_tid:
            stopper.release()
            raise NoInjectedFork(got.why_not)
        kill_here("stopped")
        held.read_in_pause()
        held.signals = got.signal_values
        held.take_signal_stacks(got.signal_stacks)
        target_maps = read_maps_text(pid)
        tls = tls_offsets(pid, libc)
        try:
            child = stopper.clone(got.inject_tid, CLONE_FILES)
        except OSError as e:
            if e.errno == errno.EPIPE:
                raise stop_error(pid, e) from None
            raise NoInjectedFork(e.strerror or str(e)) from None
        mappings, kept = _read_in_pause(pid, child, target_maps, flags)
        try:
            stopper.release()
        except OSError as e:
            raise stop_error(pid, e) from None
        kill_here("child")
        oom_victim_first(child)
        done = _Forked(stopper, threads, mappings, held, tls, kept)
        return done
    finally:
        if done is None:
            try:
                stopper.close()
            finally:
                held.close()


@contextmanager
def injected_fork(facts: Facts, plan: Plan) -> Iterator[Captured | Retry]:
    """The injected fork's capture (scan/plan.py): the frozen child and the
    heap walked over it, then the stages every scan runs; Retry (the whole
    copy next) when no child can be had, or one that lacks memory is
    refused by the walk."""
    pid = facts.pid
    proc = check_scannable(pid).proc
    mappings = read_maps(proc)
    libc = find_libc(proc, mappings)
    flags = facts.kept_out
    try:
        if why := _why_not():
            raise NoInjectedFork(why)
        if not (ip := syscall_instruction(proc, libc, mappings)):
            raise NoInjectedFork("no syscall instruction was found in its libc or vDSO")
        flags.make_room()  # its pages touched while the target runs
        take = partial(_stop_and_fork, ip=ip, flags=flags)
        got, allocs, stats = walked(proc, libc, take, _lacks)
    except (NoInjectedFork, SnapshotLacksHeap) as e:
        yield Retry(f"no copy-on-write snapshot: {e}", "fork", "snapshot")
        return
    try:
        held = Capture(
            None, got.threads, "fork", mappings=got.mappings, kernel_held=got.held,
            kept_out=got.kept_out, frozen_pid=got.memory,
            stopper_pause_ns=got.stopper.pause_ns, stopper_hold_ns=got.stopper.hold_ns,
        )  # fmt: skip
        yield no_shim_captured(pid, proc, libc, held, allocs, stats)
    finally:
        got.close()
