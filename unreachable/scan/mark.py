"""Stage mark: where the sweep runs (in the snapshot child, or from here),
and the mark-and-sweep itself (sweep/mark.py, native/mark/)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from unreachable import _native
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import Capture, CapturedThread
from unreachable.errors import mark_reads_too_much
from unreachable.process.cgroup_memory import (
    no_room_for_child_sweep,
)
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory
from unreachable.process.status import resident_anonymous_bytes
from unreachable.scan.allocations import Allocations
from unreachable.scan.facts import Facts, expected_allocations
from unreachable.scan.plan import Plan, SweepPlace
from unreachable.scan.roots import RootSet
from unreachable.sweep.child import ChildSweeper, default_mark_threads, mark_threads_beside
from unreachable.sweep.mark import SweepResult, sweep, sweep_in_child

if TYPE_CHECKING:
    from unreachable.retention.collect import GraphCollector


def sweep_places(
    plan: Plan, facts: Facts, capture: Capture, addr: int, root_words: int
) -> tuple[tuple[SweepPlace, ...], str]:
    """Where the sweep may run, in order, and why not in the child when it
    was meant to: only a fork has a child, and a child whose sweep the
    target's memory cgroup could not hold sweeps nothing."""
    if capture.snapshot != "fork":
        return ("scanner",), ""
    if plan.sweeps == ("child", "scanner") and facts.headroom is not None:
        expected = expected_allocations(capture.memory, addr)
        if expected is not None:
            anonymous = resident_anonymous_bytes(facts.pid)
            if no_room := no_room_for_child_sweep(facts.headroom, anonymous, expected, root_words):
                return ("scanner",), no_room
    return plan.sweeps, plan.sweep_note


@dataclass(slots=True, eq=False, repr=False)
class MarkOver:
    """The memory the mark reads and how: a stopped target is let go
    (release) once the walk's memory is read; a frozen child is read first
    all the same, for a marking team."""

    memory: Memory
    mappings: list[Mapping]
    threads: Sequence[CapturedThread]
    release: _native.Session | None = None
    frozen: bool = False
    kernel_held: KernelHeld | None = None  # for the reference graph's epoll owners

    @classmethod
    def of(cls, capture: Capture, mappings: list[Mapping]) -> MarkOver:
        # A target stopped in place is let go by the walk; a whole copy
        # (scan/glibc.py), made while stopped, has let it go already.
        stopped = capture.snapshot == "stopped" and capture.copy is None
        return cls(
            capture.memory,
            mappings,
            capture.threads,
            capture.session if stopped else None,
            capture.snapshot == "fork",
            capture.kernel_held,
        )


def default_team(snapshot: str, facts: Facts) -> int:
    """The marking team when the user names none: the whole team for a
    stopped scan (and a core file), else the CPUs the target's busy
    threads leave free (a copy snapshot's mark, the snapshot child's and
    the concurrent mark run beside the target)."""
    if snapshot not in ("copy", "fork", "concurrent"):
        return default_mark_threads()
    pid = facts.target.pid if facts.target else facts.pid
    helper = facts.target.header.helper_tid if facts.target else 0
    return mark_threads_beside(pid, (helper,), facts.busy_threads)


def mark(
    over: MarkOver,
    allocations: Allocations,
    roots: RootSet,
    child: ChildSweeper | None = None,
    mark_threads: int = 0,
    graph: GraphCollector | None = None,
) -> SweepResult:
    """In the child when there is one (raises ChildSweepFailed), else from here."""
    threads = mark_threads or default_mark_threads()
    registry, mappings = allocations.registry, over.mappings
    if child is not None:
        return sweep_in_child(child, registry, roots.ranges, roots.words, mappings, threads)
    graph_args = None
    if graph is not None:
        graph_args = graph.arguments(
            roots.ranges,
            registry,
            mappings,
            over.threads,
            roots.sources,
            over.memory,
            over.kernel_held,
        )
    try:
        return sweep(
            over.memory,
            registry,
            roots.ranges,
            roots.words,
            over.release,
            threads,
            mappings,
            frozen=over.frozen,
            graph=graph_args,
        )
    except OSError as e:
        if (why := mark_reads_too_much(e)) is None:
            raise
        raise why from None
