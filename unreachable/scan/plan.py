"""How a scan will go: chosen from the facts (facts.py) and the options alone.

A plan names the snapshot strategy (capture/), where the sweep runs and
the source of the allocations. plan() returns them in order of preference:
the scan runs the first, and moves to the next only when a stage returns
Retry (something only the pause could show: a fork lacks more than the
scanner may hold, the snapshot child died). Whatever made it move is said
in the report's snapshot_note or sweep_note.

The rules, for a target under the shim:
- "stopped", "copy", "fork": that strategy; a fork or copy that cannot be
  had is refused, except that a copy that cannot be brought up to date in
  the pause is swept stopped (it is stopped already).
- "auto", where the copy would be copy-on-write (Facts.cow): a copy from
  COW_FROM_BYTES of heap (its pause the stop's own work, a fork's whole
  time, only the written pages held), whatever the allocations; else a
  fork, the copy after it.
- "auto" otherwise (the classic copy holds the heap): a copy when the heap
  is big enough for a fork's page-table copy
  to pause longer (COPY_FROM_BYTES) with few enough allocations for the
  scan not to take much longer, or whatever the heap's size when a fork
  would read much that it lacks (KEPT_OUT_PREFER_COPY_BYTES); else a fork;
  a stopped target when no fork can be had (it lacks more than the
  scanner may hold, or the target's memory cgroup has no room for the
  child). A fork the helper cannot take in the pause (no helper, a seccomp
  filter in the way) leaves the target stopped and swept so.
- the sweep: in the snapshot child, the outside sweep of that child as its
  fallback ("auto"), never outside ("child"), always outside ("scanner",
  and every scan that keeps the reference graph).
- "concurrent": never with a reference graph (it keeps none) nor an
  in-child sweep. Asked for, it has no fallback. auto plans it first from
  CONCURRENT_FROM_BYTES of anonymous memory where the copy would be the
  classic one (and under a --max-pause the
  other plans are expected to break), with the pause of the plan it would
  fall through to as its bound (give_way_ms): a mark whose rounds do not
  converge, its last stop predicted to pause longer, gives way before that
  stop (docs/pause.md, "Which snapshot auto takes"). Taken by auto, one
  that gives way or whose writes cannot be tracked is followed by the next
  plan that needs no tracking (a Retry that rules out "copy" rules it out
  too).
Without the shim, glibc's heap is walked from a child made by a clone()
injected into a stopped thread (scan/glibc_fork.py), which reads what the
child lacks in its pause as a fork does; or, when none can be had, it
would lack more than the scanner may hold, or with --snapshot stopped,
from a copy made in the pause (scan/glibc.py); nothing that needs the shim
is possible then. A core file
is its own snapshot ("core", scan/core.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Literal

from unreachable.capture.copy_snapshot import COPY_FROM_BYTES, copy_pays_off
from unreachable.errors import InvalidArgument, TargetNotShimmed, TargetUnscannable
from unreachable.scan.facts import Facts
from unreachable.scan.options import ScanOptions

# Capture strategies (capture/): a frozen snapshot child, a copy made while
# the target runs, the target itself paused, a child made by a clone()
# injected into a stopped thread and a copy of the whole process made in the
# pause (both: no shim). "concurrent" is a plan kind of its own, not
# one of capture/strategies.py: its mark runs inside the capture, over the
# live target between two stops (scan/concurrent.py), so it yields no
# still memory for the allocations, roots and mark stages to read; the
# run takes its sweep straight to fold, symbolize and report.
Snapshot = Literal["fork", "copy", "stopped", "injected fork", "whole copy", "concurrent", "core"]
SweepPlace = Literal["child", "scanner"]
# Where the allocations come from: a name in allocations/source.SOURCES,
# or "glibc heap" (walked by scan/glibc.py's own capture).
Allocations = str

# Expected pause per GiB of resident anonymous memory on 4 KiB pages
# (docs/pause.md): a fork's page-table copy (20-40 ms), a copy's page-table
# walk with few pages written (1.3-4.5 ms), a stopped read of the heap at
# ~3 GB/s (300-400 ms), a fork's read of what it lacks (~2.5 GB/s), and the
# longer of the concurrent mark's two stops, beyond stopping the threads
# (5-7 ms at 1 GB, 47 ms at 4 GB: the written-page walk and the registry).
FORK_MS_PER_GIB = 30.0
COPY_MS_PER_GIB = 5.0
# The copy-on-write copy's stop: 1.2-1.7 ms at 1-2.1 GB, a few more where
# many threads write.
COW_MS_PER_GIB = 1.5
STOPPED_MS_PER_GIB = 350.0
KEPT_OUT_MS_PER_GIB = 400.0
CONCURRENT_MS_PER_GIB = 12.0
# From this much resident anonymous memory auto tries the concurrent mark
# first: its stops (1.5-2 ms on a heap whose rounds converge) are shorter
# than a fork's page-table copy from about here (6.4 ms at 0.1 GB on the
# bench, 2 ms at this size by FORK_MS_PER_GIB).
CONCURRENT_FROM_BYTES = 64 << 20

NO_CHILD_BOX = "the shim in the target has no in-child sweep"
RETRY_ELSEWHERE = "; scan it with --snapshot stopped or copy"
NO_CHILD = "no in-child sweep without a snapshot child: "
NO_GRAPH = "--snapshot concurrent keeps no reference graph; use auto, fork, copy or stopped"
UNDER_SHIM_CMD = "'unreachable-cli run -- CMD ...'"
NO_CONCURRENT = "no concurrent snapshot: "


@dataclass(frozen=True, slots=True)
class Plan:
    """How one attempt at a scan takes its snapshot and where it marks."""

    snapshot: Snapshot
    # Where the sweep runs, in order: the next when the one before fails
    # (a child that fails but stays frozen is swept from outside).
    sweeps: tuple[SweepPlace, ...] = ("scanner",)
    allocations: Allocations = "shim registry"
    # Set: a fork that cannot be had in the pause is refused with this
    # prefix. Empty: the target, stopped already, is swept in place.
    must: str = ""
    snapshot_note: str = ""  # why not the snapshot asked for, or auto's first choice
    sweep_note: str = ""  # why a snapshot child does not sweep itself
    # An explicit fork asks the helper even when its seccomp filter cannot
    # be read (one that would kill it never is asked).
    unread_filter_ok: bool = False
    # A concurrent mark taken by auto: the pause of the plan it falls
    # through to, beyond which its last stop is not taken, and that plan's
    # snapshot. None: it has nowhere to go, and always stops.
    give_way_ms: float | None = None
    give_way_to: Snapshot | None = None

    @property
    def in_child(self) -> bool:
        return self.sweeps[0] == "child"


@dataclass(slots=True, eq=False, repr=False)
class Retry:
    """What a stage returns when the plan it runs cannot finish: the scan
    moves on to the next plan that rules_out leaves."""

    reason: str
    rules_out: Literal["fork", "copy", "child"]  # plans with that snapshot or first sweep
    note: Literal["snapshot", "sweep"]  # which of the report's notes says why
    refusal: str = ""  # added to reason when no plan is left to move to

    def skips(self, plan: Plan) -> bool:
        # A copy and a concurrent mark both need the target's writes tracked.
        tracked = self.rules_out == "copy" and plan.snapshot == "concurrent"
        return tracked or self.rules_out in (plan.snapshot, plan.sweeps[0])


def _kept_out_too_big(facts: Facts) -> str:
    if not facts.kept_out.too_big:
        return ""
    return (
        f"the target keeps {facts.kept_out.resident >> 20} MiB out of forks"
        " (MADV_DONTFORK or MADV_WIPEONFORK), more than this scanner may hold"
    )


def plan(facts: Facts, options: ScanOptions, graph: bool = False) -> list[Plan]:
    """The plans to try, best first. graph: the scan keeps the mark's
    reference graph (retention/), which only a sweep from here can.
    Raises what no plan could get past, before anything is stopped."""
    if facts.core is not None:
        # Its memory is the snapshot; what allocator the process used, the
        # core says (scan/core.py).
        return [Plan("core")]
    plans = _plans(facts, options, graph)
    if options.max_pause_ms is not None:
        auto = facts.shim and options.snapshot == "auto" and options.sweep == "auto" and not graph
        plans = _within_pause(plans, facts, options.max_pause_ms, auto)
    return _give_way(plans, facts)


def _give_way(plans: list[Plan], facts: Facts) -> list[Plan]:
    """Each concurrent mark auto planned gets the expected pause of the plan
    a give-way would fall through to: the next one that needs no tracking
    (its Retry rules out a copy as well, whose pause grows with the same
    writes)."""
    untracked = Retry("", "copy", "snapshot")
    out = []
    for i, p in enumerate(plans):
        if p.snapshot == "concurrent" and not p.must:
            after = next((q for q in plans[i + 1 :] if not untracked.skips(q)), None)
            if after is not None:
                p = replace(
                    p,
                    give_way_ms=expected_pause_ms(facts, after.snapshot),
                    give_way_to=after.snapshot,
                )
        out.append(p)
    return out


def expected_pause_ms(facts: Facts, snapshot: Snapshot) -> float:
    """What the target is expected to feel of a snapshot, from the memory it
    holds: a fork's page-table copy and its read of what the child lacks, a
    copy's page-table walk, the concurrent mark's longer stop, or a read of
    the whole heap while stopped."""
    gib = facts.anonymous_bytes / (1 << 30)
    if snapshot == "concurrent":
        return gib * CONCURRENT_MS_PER_GIB
    if snapshot in ("fork", "injected fork"):
        return gib * FORK_MS_PER_GIB + facts.kept_out.resident / (1 << 30) * KEPT_OUT_MS_PER_GIB
    if snapshot == "copy":
        return gib * (COW_MS_PER_GIB if facts.cow else COPY_MS_PER_GIB)
    return gib * STOPPED_MS_PER_GIB


def _within_pause(plans: list[Plan], facts: Facts, max_ms: float, auto: bool) -> list[Plan]:
    """--max-pause: auto keeps its order among the plans expected to pause
    less than max_ms, and puts the others after them, shortest pause first;
    when one is over, a copy and a concurrent mark are among them whatever
    the heap's size and the number of allocations. A plan expected to pause
    longer says so in its snapshot_note."""

    def over(p: Plan) -> bool:
        return expected_pause_ms(facts, p.snapshot) > max_ms

    if auto and any(map(over, plans)):
        have = {p.snapshot for p in plans}
        plans = [*plans, *(Plan(k) for k in ("copy", "concurrent") if k not in have)]
        longer = sorted(
            (p for p in plans if over(p)), key=lambda p: expected_pause_ms(facts, p.snapshot)
        )
        plans = [p for p in plans if not over(p)] + longer
    return [
        replace(p, snapshot_note=_join(p.snapshot_note, _over_budget(facts, p, max_ms)))
        if over(p)
        else p
        for p in plans
    ]


def _over_budget(facts: Facts, p: Plan, max_ms: float) -> str:
    ms = expected_pause_ms(facts, p.snapshot)
    kind = {
        "fork": "a fork snapshot",
        "injected fork": "a fork snapshot",
        "copy": "a copy snapshot",
        "concurrent": "a concurrent snapshot",
    }.get(p.snapshot, "a stopped scan")
    return (
        f"{kind} is expected to pause the target about {ms:.0f} ms,"
        f" more than --max-pause {max_ms:g} ms"
    )


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _plans(facts: Facts, options: ScanOptions, graph: bool) -> list[Plan]:
    if options.snapshot == "concurrent" and graph:
        raise InvalidArgument(NO_GRAPH)
    if not facts.shim:
        return _without_shim(facts, options, graph)
    if options.snapshot == "concurrent":
        if options.sweep == "child":
            raise TargetUnscannable(f"{NO_CHILD}--snapshot concurrent takes none")
        return [Plan("concurrent", must=NO_CONCURRENT)]
    in_child = options.sweep != "scanner" and not graph
    sweeps: tuple[SweepPlace, ...] = ("scanner",)
    sweep_note = ""
    if in_child and not facts.child_box:
        sweep_note = NO_CHILD_BOX
    elif in_child:
        sweeps = ("child",) if options.sweep == "child" else ("child", "scanner")
    fork = Plan("fork", sweeps, sweep_note=sweep_note)
    # After a child that died: a new snapshot, swept from here.
    refork = [Plan("fork", ("scanner",))] if sweeps == ("child", "scanner") else []
    if options.snapshot == "stopped" or options.snapshot == "copy":
        if options.sweep == "child":
            raise TargetUnscannable(f"{NO_CHILD}--snapshot {options.snapshot} takes none")
        return [
            Plan(options.snapshot, must="no copy snapshot: " if options.snapshot == "copy" else "")
        ]
    too_big = _kept_out_too_big(facts)
    if options.snapshot == "fork":
        if too_big:
            raise TargetUnscannable(too_big + RETRY_ELSEWHERE)
        # Asked for: refused when it cannot be had.
        return [
            replace(p, must="snapshot failed: ", unread_filter_ok=True) for p in (fork, *refork)
        ]
    if options.sweep == "child":
        if why := too_big or facts.fork_room:
            raise TargetUnscannable(NO_CHILD + why)
        return [Plan("fork", sweeps, must=NO_CHILD, sweep_note=sweep_note)]
    plans = _auto(facts, fork, refork, too_big)
    # The pause the target feels: a concurrent mark first on a heap where
    # its stops beat a fork's, giving way when the target writes too much;
    # not where the copy is copy-on-write, whose one stop is as short and
    # whose scan and memory are less (docs/pause.md, "Which snapshot auto
    # takes").
    concurrent = options.sweep == "auto" and not graph and not facts.cow
    if concurrent and facts.anonymous_bytes >= CONCURRENT_FROM_BYTES:
        plans = [Plan("concurrent"), *plans]
    return plans


def _auto(facts: Facts, fork: Plan, refork: list[Plan], too_big: str) -> list[Plan]:
    pays = partial(copy_pays_off, facts.anonymous_bytes, facts.allocations, cow=facts.cow)
    copy_now = pays(COPY_FROM_BYTES) or (facts.kept_out.prefers_copy and pays(0))
    # Once a fork had too much kept out of it, a copy of any size beats a
    # stopped scan.
    copy_later = pays(0)
    first = [Plan("copy")] if copy_now else []
    if no_fork := too_big or facts.fork_room:
        return [*first, Plan("stopped", snapshot_note=no_fork)]
    later = [Plan("copy")] if copy_later and not copy_now else []
    return [*first, fork, *refork, *later, Plan("stopped")]


def _without_shim(facts: Facts, options: ScanOptions, graph: bool) -> list[Plan]:
    if not facts.glibc_heap:
        raise TargetNotShimmed(facts.no_shim)
    # The helper thread makes the fork and copy snapshots and marks the
    # concurrent one; why and retainers read the shim's registry. A scan
    # without the shim does none of it: what to drop is said, as the scan
    # without it works.
    asked = (
        f"--snapshot {options.snapshot}"
        if options.snapshot in ("fork", "copy", "concurrent")
        else "--sweep child"
        if options.sweep == "child"
        else ""
    )
    if asked:
        raise TargetNotShimmed(
            f"pid {facts.pid} runs without the unreachable shim, and {asked} needs the shim's"
            f" helper thread: drop {asked.split()[0]} (without the shim the scan makes a"
            " copy-on-write snapshot of its own, or copies the process's memory while it is"
            " stopped, and walks glibc's heap in it), or start the process under the shim:"
            f" {UNDER_SHIM_CMD}"
        )
    if graph:
        raise TargetNotShimmed(
            f"pid {facts.pid} runs without the unreachable shim: the reference graph of why"
            " and retainers needs the shim's allocation registry; 'unreachable-cli scan"
            f" {facts.pid}' reports its leaks without it, or start the process under the"
            f" shim: {UNDER_SHIM_CMD}"
        )
    whole = Plan("whole copy", allocations="glibc heap")
    if options.snapshot == "stopped":
        return [whole]
    # Past KEPT_OUT_PREFER_COPY_BYTES the child is still made: the whole
    # copy's pause reads what it lacks too, and the rest of the memory.
    if too_big := _kept_out_too_big(facts):
        return [replace(whole, snapshot_note=too_big)]
    # The copy when no child can be had (scan/glibc_fork.py says why).
    return [Plan("injected fork", allocations="glibc heap"), whole]
