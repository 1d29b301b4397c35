"""The snapshot of a process that runs without the shim, when it can be
had: a copy-on-write child made by injecting clone() into one of its
stopped threads (the "injected fork" plan; docs/glibc-heap.md, "The
snapshot"). The pause is the page-table copy, not a copy of the heap.

capture: the stopper (capture/stopper.py, native/stopper) stops every
thread and runs those inside malloc out of it, as the whole copy does;
the pointers the kernel holds are read, then one thread runs a raw
clone(CLONE_FILES, exit signal 0) from a syscall instruction of the
process's libc, its registers and signal mask put back as they were, and
the process is let go. The child never runs: it is read through
/proc/CHILD/mem (process_vm_readv would make the kernel copy each page it
reads), then killed and reaped by an injected wait4 in the target. glibc's
heap is walked over the child as over the whole copy (scan/glibc.py),
from a new stop while it is found mid-update.

When it cannot be had, the whole copy follows (scan/plan.py), and the
report's snapshot_note says why: a seccomp filter that could refuse or
kill the clone or the wait4 (or cannot be read), memory the child would
lack (MADV_DONTFORK, MADV_WIPEONFORK), no thread free to take the call,
no syscall instruction found, or the clone itself failed.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from unreachable.allocations.glibc_heap import GlibcLibc, find_libc, tls_offsets
from unreachable.capture.kept_out_of_fork import fork_flags
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import Capture, CapturedThread, stop_error
from unreachable.capture.stopper import Stopper, kill_here, stopper_path
from unreachable.errors import TargetUnscannable
from unreachable.process.cgroup_memory import oom_victim_first
from unreachable.process.maps import Mapping, read_maps
from unreachable.process.memory import Read, memory_reader, present_ranges
from unreachable.process.status import check_scannable
from unreachable.scan.captured import Captured
from unreachable.scan.facts import Facts
from unreachable.scan.glibc import RUN_OUT_ROUNDS, no_shim_captured, walked
from unreachable.scan.plan import Plan, Retry

# Shares the descriptor table: the child holds no descriptor of its own, so
# a pipe or socket the target closes meanwhile is closed at once, not when
# the child dies. Exit signal 0 (the low byte): its death sends no SIGCHLD.
CLONE_FILES = 0x400
SYSCALL = b"\x0f\x05"
SEARCHED = 4 << 20  # bytes of executable code looked through for a syscall instruction
PAGE = 4096


class NoInjectedFork(Exception):
    """Why this process gets the whole copy instead."""


@dataclass(slots=True)
class _Forked:
    stopper: Stopper
    threads: list[CapturedThread]
    mappings: list[Mapping]
    held: KernelHeld
    tls: list[tuple[int, int]]

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


def syscall_instruction(pid: int, libc: GlibcLibc, mappings: list[Mapping]) -> int:
    """The address of a syscall instruction in the process's libc code, or
    its vDSO: where the injected thread is pointed. Any two bytes 0f 05
    decode as one from there, whatever instruction they belong to."""
    path = libc.mapping.path
    code = [m for m in mappings if m.executable and m.path == path]
    code += [m for m in mappings if m.executable and m.path == "[vdso]"]
    with memory_reader(pid) as read:
        for m in code:
            span = (m.start, min(m.end, m.start + SEARCHED))
            # A page at a time, those the process maps already first: a page
            # of code read through /proc is faulted into the target, and
            # reading all of libc's text at once grew a server's RSS by the
            # 744 KiB of it the server had never run.
            for begin, end in [*present_ranges(pid, [span]), span]:
                if (at := _find_syscall(read, begin, end)) is not None:
                    return at
    raise NoInjectedFork("no syscall instruction was found in its libc or vDSO")


def _find_syscall(read: Read, begin: int, end: int) -> int | None:
    for page in range(begin, end, PAGE):
        try:
            text = read(page, min(PAGE, end - page))
        except OSError:
            return None
        if (at := text.find(SYSCALL)) >= 0:
            return page + at
    return None


def _why_not(pid: int) -> str:
    if not os.access(stopper_path(), os.X_OK):
        return f"{stopper_path()} is missing"
    if kept := fork_flags(pid).resident:
        return (
            f"it keeps {kept >> 10} KiB out of forks (MADV_DONTFORK or MADV_WIPEONFORK),"
            " which a child would lack"
        )
    return ""


def _stop_and_fork(pid: int, libc: GlibcLibc, ip: int) -> _Forked | str:
    """The frozen child of one stop, or why the stop was no good (a thread
    inside malloc). Raises NoInjectedFork when no child can be had."""
    held = KernelHeld.before_stop(pid)
    stopper = Stopper(pid, ip)
    done: _Forked | None = None
    try:
        try:
            got = stopper.stop(libc.malloc_code, RUN_OUT_ROUNDS, CLONE_FILES)
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
        mappings = read_maps(pid)
        tls = tls_offsets(pid, libc)
        try:
            child = stopper.clone(got.inject_tid, CLONE_FILES)
        except OSError as e:
            if e.errno == errno.EPIPE:
                raise stop_error(pid, e) from None
            raise NoInjectedFork(e.strerror or str(e)) from None
        kill_here("child")
        oom_victim_first(child)
        done = _Forked(stopper, threads, mappings, held, tls)
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
    copy next) when no child can be had."""
    pid = facts.pid
    proc = check_scannable(pid).proc
    mappings = read_maps(proc)
    libc = find_libc(proc, mappings)
    try:
        if why := _why_not(proc):
            raise NoInjectedFork(why)
        ip = syscall_instruction(proc, libc, mappings)
        got, allocs, stats = walked(proc, libc, partial(_stop_and_fork, ip=ip))
    except NoInjectedFork as e:
        yield Retry(f"no copy-on-write snapshot: {e}", "fork", "snapshot")
        return
    try:
        held = Capture(
            None, got.threads, "fork", mappings=got.mappings, kernel_held=got.held,
            frozen_pid=got.memory, frozen_pause_ns=got.stopper.pause_ns,
        )  # fmt: skip
        yield no_shim_captured(pid, proc, libc, held, allocs, stats)
    finally:
        got.close()
