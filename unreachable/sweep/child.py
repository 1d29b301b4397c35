"""Drive the in-child sweep (abi.h struct ur_child_box).

In fork mode the frozen snapshot child is a private copy of the target, so
it can mark and fold its own memory with plain loads, as libmemunreachable's
sweeper does, instead of being read through /proc/CHILD/mem. The scanner
still decides what the roots are; it hands them to the child and reads back
totals and one compact record per leak. The shared mark/fold code is
native/mark/; the child's side is native/shim/child.c.

Every failure raises ChildSweepFailed; `frozen` says whether the child is
still stopped with its memory intact (then the caller sweeps it from outside)
or gone (then the caller takes a new snapshot).
"""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from unreachable import _native
from unreachable.capture.target import still_running
from unreachable.process.status import thread_state

MAX_MARK_THREADS = _native.CHILD_MAX_THREADS
SWEEP_REPLY_SIZE = _native.abi_sizeof("ur_child_sweep_reply")
LEAK_RECORD_SIZE = _native.abi_sizeof("ur_leak_record")

# Generous: the child sweeps a 10M-block heap in seconds; a hang means a bug.
DEFAULT_TIMEOUT_S = 600.0
# How the target's busy threads are counted (busy_threads): three looks a
# millisecond apart, 2 ms before a mark of seconds.
BUSY_SAMPLES = 3
BUSY_GAP_S = 0.001


def default_mark_threads() -> int:
    """Marking threads in the snapshot child unless told otherwise: the CPUs
    this scanner may run on, at most 4 (the mark is bound by memory latency,
    and more threads than that take more from the target than they save)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def busy_threads(pid: int, skip: Collection[int] = (), samples: int = BUSY_SAMPLES) -> int:
    """The process's threads that want a CPU (running or runnable: state R
    in /proc/PID/task/TID/stat), less those in skip, on average over a few
    looks BUSY_GAP_S apart (a thread busy half the time counts half)."""
    return BusyLooks(pid, samples).count(skip)


class BusyLooks:
    """busy_threads' looks, the first taken when made: work done between it
    and count() (a scan's other facts) stands in for the wait before the
    next, which sleeps only for what is left of BUSY_GAP_S."""

    def __init__(self, pid: int, samples: int = BUSY_SAMPLES) -> None:
        self.pid, self.samples = pid, samples
        self.running: list[list[int]] = []  # each look's threads in state R
        self.last, self.gone = 0.0, False
        self.look()

    def look(self) -> None:
        if self.running:
            time.sleep(max(0.0, self.last + BUSY_GAP_S - time.monotonic()))
        self.last = time.monotonic()
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            tids, self.gone = [], True
        self.running.append([int(t) for t in tids if thread_state(self.pid, t) == "R"])

    def look_if_due(self) -> None:
        """A look where one is still wanted and its gap has passed."""
        if len(self.running) < self.samples and time.monotonic() - self.last >= BUSY_GAP_S:
            self.look()

    def count(self, skip: Collection[int] = ()) -> int:
        while len(self.running) < self.samples:
            self.look()
        if self.gone:
            return 0
        seen = sum(t not in skip for look in self.running[: self.samples] for t in look)
        return (2 * seen + self.samples) // (2 * self.samples)  # rounded half up


def mark_threads_beside(pid: int, skip: Collection[int] = (), busy: int | None = None) -> int:
    """Marking threads for a mark that runs while its target does (a copy
    snapshot's, the concurrent mark's, the snapshot child's): the CPUs the
    target's busy threads leave free, at least one, at most the default
    team. A marking thread on a core the target's thread needs makes that
    thread wait a scheduler slice (docs/pause.md, "What the target
    feels"); skip: the shim's helper, whose work is the scan's; busy: the
    count if already taken."""
    if busy is None:
        busy = busy_threads(pid, skip)
    free = len(os.sched_getaffinity(0)) - busy
    return max(1, min(default_mark_threads(), free))


class ChildSweepFailed(Exception):
    def __init__(self, message: str, frozen: bool) -> None:
        super().__init__(message)
        self.frozen = frozen  # the child is stopped and its memory intact


@dataclass(slots=True, eq=False, repr=False)
class ChildIndex:
    """The snapshot child's reply once it has indexed the allocations."""

    entries: int
    allocation_count: int
    allocation_bytes: int
    overlapping: int
    index_ms: float
    features: int


@dataclass(slots=True, eq=False, repr=False)
class ChildSweepReply:
    """The snapshot child's reply once it has marked and folded."""

    unreachable_count: int
    unreachable_bytes: int
    bytes_scanned: int
    pages_skipped: int
    mark_ms: float
    fold_ms: float
    bounced_pages: int
    leaks: bytes | memoryview  # packed abi.h ur_leak_records, address order
    mark_threads: int = 1  # the team that marked (an older child: the team asked of it)


def _pairs(ranges: Sequence[tuple[int, int]]) -> bytes:
    return _native.abi_encode_array("ur_range", ranges)


def words(values: Iterable[int]) -> bytes:
    """uint64_t words, packed (root values, in-flight addresses, a cap)."""
    return array("Q", values).tobytes()


class ChildSweeper:
    """One snapshot child sweeping itself; the Session must be in fork mode."""

    def __init__(
        self, session: _native.Session, box_addr: int, timeout_s: float | None = None
    ) -> None:
        self.session = session
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        self._index: ChildIndex | None = None
        try:
            session.child_start(box_addr)
        except OSError as e:
            raise self._fail("start", e) from None

    def _fail(self, what: str, e: OSError) -> ChildSweepFailed:
        child = self.session.snapshot_pid
        gone = isinstance(e, ProcessLookupError) or child is None or not still_running(child)
        return ChildSweepFailed(f"in-child sweep, {what}: {e}", frozen=not gone)

    def index(self) -> ChildIndex:
        """Wait for the child's allocation index (built while the caller works)."""
        if self._index is None:
            try:
                raw = self.session.child_wait(self.timeout_s)
            except OSError as e:
                raise self._fail("index", e) from None
            f = _native.abi_decode("ur_child_index", raw)
            self._index = ChildIndex(
                entries=f["entries"],
                allocation_count=f["allocation_count"],
                allocation_bytes=f["allocation_bytes"],
                overlapping=f["overlapping"],
                index_ms=f["index_ns"] / 1e6,
                features=f["features"],
            )
        return self._index

    def holds(self, ranges: Sequence[tuple[int, int]]) -> list[bool]:
        """For each [begin, end): does a registered block begin inside it?"""
        self.index()
        try:
            raw = self.session.child_request(
                _native.CHILD_REQ_HOLDS, _pairs(ranges), self.timeout_s
            )
        except OSError as e:
            raise self._fail("holds", e) from None
        return [bool(b) for b in raw]

    def blocks_in(self, ranges: Sequence[tuple[int, int]], cap: int) -> list[list[int] | None]:
        """For each [begin, end): the blocks that begin inside it, ascending,
        or None when there are more than cap (or the child cannot list them
        and one begins there)."""
        if not self.index().features & _native.CHILD_FEATURE_BLOCKS:
            return [None if held else [] for held in self.holds(ranges)]
        try:
            raw = self.session.child_request(
                _native.CHILD_REQ_BLOCKS, words([cap]) + _pairs(ranges), self.timeout_s
            )
        except OSError as e:
            raise self._fail("blocks", e) from None
        reply = array("Q", raw[: len(raw) // 8 * 8])
        counts, addrs = reply[: len(ranges)], reply[len(ranges) :]
        out: list[list[int] | None] = []
        at = 0
        for count in counts:
            listed = min(count, cap)
            out.append(list(addrs[at : at + listed]) if count <= cap else None)
            at += listed
        if len(counts) != len(ranges) or at != len(addrs):
            raise ChildSweepFailed("in-child sweep: truncated blocks reply", frozen=True)
        return out

    def sweep(
        self,
        ranges: Sequence[tuple[int, int]],
        values: bytes,
        excluded: Sequence[int],
        readable: Sequence[tuple[int, int]],
        threads: int = 1,
    ) -> ChildSweepReply:
        """threads: marking threads; a child from an older shim marks alone."""
        index = self.index()
        if not index.features & _native.CHILD_FEATURE_OWNED:
            # Its leak records would count a block under every leak reaching
            # it, and no export could add them up to the totals.
            raise ChildSweepFailed(
                "in-child sweep: the target's shim counts a block under every leak that"
                " reaches it (an older shim); swept from outside",
                frozen=True,
            )
        usable = len(values) - len(values) % 8
        parts = [
            _native.abi_encode(
                "ur_child_sweep_req",
                {
                    "nranges": len(ranges),
                    "nvalues": usable // 8,
                    "nexcluded": len(excluded),
                    "nreadable": len(readable),
                },
            ),
            _pairs(ranges),
            values[:usable],
            words(excluded),
            _pairs(readable),
        ]
        threads = max(1, min(threads, MAX_MARK_THREADS))
        if threads > 1 and index.features & _native.CHILD_FEATURE_TEAM:
            parts.append(_native.abi_encode("ur_child_sweep_opts", {"threads": threads}))
        else:
            threads = 1
        payload = b"".join(parts)
        try:
            raw = self.session.child_request(_native.CHILD_REQ_SWEEP, payload, self.timeout_s)
        except OSError as e:
            raise self._fail("sweep", e) from None
        if len(raw) < SWEEP_REPLY_SIZE:
            raise ChildSweepFailed("in-child sweep: truncated reply", frozen=True)
        f = _native.abi_decode("ur_child_sweep_reply", raw)
        # Views, not copies: with millions of leaks each copy is 40 bytes a leak.
        leaks = memoryview(raw)[SWEEP_REPLY_SIZE:]
        if index.features & _native.CHILD_FEATURE_TEAM_SIZE:
            leaks, tail = leaks[:-8], leaks[-8:]
            threads = int.from_bytes(tail, "little") if len(tail) == 8 else 0
        if len(leaks) != f["nleaks"] * LEAK_RECORD_SIZE or threads == 0:
            raise ChildSweepFailed("in-child sweep: truncated reply", frozen=True)
        return ChildSweepReply(
            unreachable_count=f["unreachable_count"],
            unreachable_bytes=f["unreachable_bytes"],
            bytes_scanned=f["bytes_scanned"],
            pages_skipped=f["pages_skipped"],
            mark_ms=f["mark_ns"] / 1e6,
            fold_ms=f["fold_ns"] / 1e6,
            bounced_pages=f["bounced_pages"],
            leaks=leaks,
            mark_threads=threads,
        )
