"""One scan: the facts, a plan, then the stages, plan after plan until one
finishes (docs/scan-stages.md).

capture -> allocations -> roots -> mark -> fold -> symbolize -> report.
The target is paused only inside capture (in "stopped" mode, until the
memory the sweep needs is read); symbolization runs after it has been
released. In "copy" mode every stage reads the copy made in capture, the
target running on. In fork mode the snapshot child sweeps itself
(sweep/child.py); if that fails with the child frozen, the same child is
swept from outside, and if the child died, the next plan takes a new
snapshot: a scan never gets worse than the outside sweep. A concurrent
plan marks inside its capture (run_concurrent), then folds, symbolizes and
reports as the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from unreachable import _native
from unreachable.capture.copy_snapshot import cow_broken
from unreachable.capture.target import still_running
from unreachable.capture.write_tracking import TrackingUnavailable, ended
from unreachable.errors import (
    InvalidArgument,
    MarkReadsTooMuch,
    TargetNotFound,
    TargetUnscannable,
)
from unreachable.model.report import ScanReport
from unreachable.process.maps import Mapping, read_maps
from unreachable.roots import sources
from unreachable.roots.glibc_arena import find_main_arena
from unreachable.scan.allocations import Allocations, find_allocations
from unreachable.scan.capture import capture_for
from unreachable.scan.captured import Captured
from unreachable.scan.facts import Facts, gather_facts
from unreachable.scan.fold import fold
from unreachable.scan.mark import MarkOver, default_team, mark, sweep_places
from unreachable.scan.options import Progress, ScanOptions
from unreachable.scan.plan import Plan, Retry, plan
from unreachable.scan.report import Scanned, build_report, join_notes
from unreachable.scan.roots import RootInputs, RootSet, find_roots
from unreachable.scan.symbolize import Backtraces, read_backtraces, symbolize
from unreachable.sweep.child import ChildSweeper, ChildSweepFailed
from unreachable.sweep.mark import SweepResult

if TYPE_CHECKING:
    from unreachable.retention.collect import GraphCollector


def scan(
    pid: int,
    options: ScanOptions | None = None,
    progress: Progress | None = None,
    graph: GraphCollector | None = None,
) -> ScanReport:
    """graph: the scan also keeps the mark's reference graph and hands it to
    this collector (unreachable/retention: why, retainers); the sweep then
    runs here, never in the snapshot child, which has no way to send it."""
    options = options or ScanOptions()
    if options.limit < 0:
        raise InvalidArgument("--limit must be >= 0")
    started = time.monotonic()
    facts = gather_facts(pid, options)
    plans = plan(facts, options, graph is not None)
    return run_plans(facts, plans, options, progress, started, graph)


def scan_core(
    path: str,
    exe: str | None = None,
    sysroot: str | None = None,
    options: ScanOptions | None = None,
    progress: Progress | None = None,
) -> ScanReport:
    """A core file (capture/core_file.py), through the same plan and
    stages: its memory is the snapshot (scan/core.py). exe, sysroot: where
    the files it names are."""
    # A core's report shows contents only when asked for.
    options = replace(options or ScanOptions(), sample_contents=0)
    if options.limit < 0:
        raise InvalidArgument("--limit must be >= 0")
    from unreachable.capture.core_file import open_core

    started = time.monotonic()
    core = open_core(path, exe, sysroot)
    try:
        facts = Facts(core.pid, core=core)
        return run_plans(facts, plan(facts, options), options, progress, started)
    finally:
        core.close()


def run_plans(
    facts: Facts,
    plans: list[Plan],
    options: ScanOptions,
    progress: Progress | None = None,
    started: float | None = None,
    graph: GraphCollector | None = None,
) -> ScanReport:
    """The first plan that finishes; each Retry skips the plans it rules out
    and is said in the report's notes."""
    note = progress or (lambda _stage: None)
    started = time.monotonic() if started is None else started
    retries: list[Retry] = []
    for planned in plans:
        if any(r.skips(planned) for r in retries):
            continue
        planned = replace(
            planned,
            snapshot_note=join_notes(
                *(r.reason for r in retries if r.note == "snapshot"), planned.snapshot_note
            ),
            sweep_note=join_notes(
                *(r.reason for r in retries if r.note == "sweep"), planned.sweep_note
            ),
        )
        if planned.snapshot == "concurrent":
            got = run_concurrent(facts, planned, options, note, started)
        else:
            got = run_plan(facts, planned, options, note, started, graph)
        if isinstance(got, ScanReport):
            return got
        retries.append(got)
    last = retries[-1] if retries else Retry("no plan", "fork", "snapshot")
    raise TargetUnscannable(last.reason + last.refusal)


@dataclass(slots=True, eq=False, repr=False)
class _Swept:
    """What a plan's mark produced, for the report."""

    mappings: list[Mapping]
    allocations: Allocations
    roots: RootSet
    result: SweepResult
    sweep_note: str


def run_plan(
    facts: Facts,
    planned: Plan,
    options: ScanOptions,
    note: Progress,
    started: float,
    graph: GraphCollector | None = None,
) -> ScanReport | Retry:
    """Capture, allocations, roots, mark, fold, symbolize, report: one plan,
    whatever its snapshot strategy and allocation source."""
    # Until the capture names the process: the shim's target, or the pid asked for.
    pid = tgid = facts.pid
    if facts.target is not None:
        pid, tgid = facts.target.pid, facts.target.tgid
    forked = False
    # A previous plan's copy snapshot may still be ending (end_in_background):
    # this plan's snapshot starts from a target let go.
    ended(pid)
    try:
        with capture_for(facts, planned) as got:
            if isinstance(got, Retry):
                return got
            note("captured")
            held, subject = got.held, got.subject
            pid, tgid, addr = subject.pid, subject.tgid, subject.descriptor_addr
            forked = held.snapshot == "fork"
            swept = _sweep(facts, planned, got, options, note, graph)
            if isinstance(swept, Retry):
                return swept
            memory, mappings = held.memory, swept.mappings
            if graph and swept.result.graph is not None and addr is not None:
                registry = swept.allocations.registry
                graph.collect(swept.result.graph, registry, memory, addr, mappings, tgid)
            note("marked")
            live = subject.live
            folded = fold(
                swept.result, options, memory, mappings, pid if live else 0, subject.typed
            )
            note("folded")
            # Only the shim's registry keeps backtraces (its stack depot).
            backtraces = read_backtraces(memory, addr, folded.leaks) if addr else Backtraces()
            broken = cow_broken(memory, pid, _read_by_the_scan(swept))
    except (ProcessLookupError, TargetNotFound):
        # The target (or its frozen copy) vanished between two reads. A child
        # killed under a running target: the next plan, a new snapshot. A
        # target paused in place that vanished is dying, however /proc shows
        # it in this instant: no second try.
        if planned.in_child and forked and still_running(pid):
            return Retry("the snapshot child vanished", "child", "sweep")
        raise TargetNotFound(f"process {tgid} exited during the scan") from None
    if broken:
        # Once: the next copy of this pid is a classic one.
        again = join_notes(planned.snapshot_note, f"{broken}; copied")
        return run_plan(facts, replace(planned, snapshot_note=again), options, note, started, graph)
    if live and not still_running(pid):
        raise TargetNotFound(f"process {tgid} exited during the scan")
    files = subject.symbol_files(mappings)
    symbolized = symbolize(
        pid if live else None, files, backtraces, options.symbol_budget, None if live else ""
    )
    note("done")
    scanned = Scanned(
        tgid,
        subject.command,
        held.snapshot,
        len(held.threads),
        held.pause_ms,
        started,
        join_notes(
            planned.snapshot_note,
            held.snapshot_error,
            over_budget(options, held.pause_ms),
            held.kernel_held.note if held.kernel_held else "",
        ),
        swept.sweep_note,
        held.hold_ms,
    )
    roots = swept.roots.counts()
    return build_report(scanned, swept.result, folded, symbolized, roots, got.source.name)


def _reads_too_much(e: MarkReadsTooMuch, planned: Plan) -> Retry:
    """auto's next plan after a mark whose reads of the target would not
    end (a fork's child reads its own memory, no cache between)."""
    rules_out: Literal["fork", "copy"] = "fork" if planned.snapshot == "fork" else "copy"
    return Retry(f"{e.why}; took the next snapshot", rules_out, "snapshot")


def _read_by_the_scan(swept: _Swept) -> list[tuple[int, int]]:
    """Where the scan read the target's memory for what it reports: the
    roots, the heap's blocks and the shim's own memory (the registry, the
    stack depot). Memory released elsewhere cannot change the report."""
    registry = swept.allocations.registry
    return sorted([*swept.roots.ranges.ranges, *swept.allocations.spans, *registry.regions])


def over_budget(options: ScanOptions, pause_ms: float) -> str:
    """What the report says of a pause longer than --max-pause: the plan
    expected less, or none could."""
    budget = options.max_pause_ms
    if budget is None or pause_ms <= budget:
        return ""
    return f"the target was paused {pause_ms:.1f} ms, more than --max-pause {budget:g} ms"


def run_concurrent(
    facts: Facts, planned: Plan, options: ScanOptions, note: Progress, started: float
) -> ScanReport | Retry:
    """The concurrent plan: its capture is its mark (scan/concurrent.py),
    then fold, symbolize and report as every plan, reading the live target.
    That is sound: nothing can reach a leaked block, so the target no
    longer writes it, and the shim never rewrites a stack-depot entry.
    Writes that cannot be tracked: refused when asked for (planned.must),
    else the next plan that needs no tracking; so is a mark whose last stop
    would pause longer than that plan (planned.give_way_ms)."""
    # Imported here: only this plan marks concurrently, and a scan's imports
    # are part of its time.
    from unreachable.scan.concurrent import GaveWay, concurrent_sweep

    target = facts.target
    assert target is not None
    pid = target.pid
    try:
        # The spare cores from the facts' count of busy threads, not a second count.
        spare = default_team("concurrent", facts)
        done = concurrent_sweep(target, planned.give_way_ms, options.mark_threads, spare)
        note("marked")
        folded = fold(done.result, options, pid, done.mappings, pid)
        note("folded")
        backtraces = read_backtraces(pid, target.shim.descriptor_addr, folded.leaks)
    except TrackingUnavailable as e:
        if planned.must:
            raise TargetUnscannable(f"{planned.must}{e}") from None
        return Retry(f"no concurrent snapshot: {e}", "copy", "snapshot")
    except MarkReadsTooMuch as e:
        if options.snapshot != "auto":
            raise
        return _reads_too_much(e, planned)
    except GaveWay as e:
        instead = {"fork": "forked", "stopped": "scanned it stopped"}.get(
            planned.give_way_to or "", "took the next snapshot"
        )
        return Retry(f"{e}; {instead} instead", "copy", "snapshot")
    except (ProcessLookupError, FileNotFoundError, TargetNotFound):
        raise TargetNotFound(f"process {target.tgid} exited during the scan") from None
    except OSError as e:
        if not still_running(pid):
            raise TargetNotFound(f"process {target.tgid} exited during the scan") from None
        raise TargetUnscannable(f"the concurrent snapshot failed: {e}") from None
    if not still_running(pid):
        raise TargetNotFound(f"process {target.tgid} exited during the scan")
    symbolized = symbolize(pid, done.mappings, backtraces, options.symbol_budget)
    note("done")
    p1, p2 = done.pauses_ms
    stops = (
        f"two stops, {p1:.1f} ms and {p2:.1f} ms; {done.rescued} candidates rescued,"
        f" {done.gone} freed or reallocated during the mark"
    )
    scanned = Scanned(
        target.tgid,
        target.command,
        "concurrent",
        len(done.threads),
        done.pause_ms,
        started,
        join_notes(planned.snapshot_note, stops, over_budget(options, done.pause_ms), done.unread),
        hold_ms=done.hold_ms,
    )
    roots = dict(done.roots.kinds) | done.value_counts
    return build_report(scanned, done.result, folded, symbolized, roots, planned.allocations)


def _sweep(
    facts: Facts,
    planned: Plan,
    got: Captured,
    options: ScanOptions,
    note: Progress,
    graph: GraphCollector | None,
) -> _Swept | Retry:
    """Allocations, roots and mark at each place the plan lets the sweep
    run, until one finishes: a child that fails but stays frozen is swept
    from here; one that died needs a new snapshot (Retry)."""
    held, subject, room = got.held, got.subject, facts.scanner_room
    addr = subject.descriptor_addr
    # A child's maps were read before it ran a single instruction: its own
    # memory (stack, inbox, scratch) never becomes a root.
    mappings = held.mappings or read_maps(held.mem_pid)
    candidates = sources.kept_out_candidates(held.kept_out, mappings)
    places, sweep_note = sweep_places(planned, facts, held, addr or 0, len(candidates))
    arena = subject.main_arena or find_main_arena(held.memory, mappings)
    own = [r for r in (arena, subject.own_bss) if r]
    inputs = RootInputs(
        subject.own_path,
        own,
        held.kernel_held,
        held.kept_out,
        candidates,
        subject.altstacks,
    )
    for place in places:
        try:
            child = ChildSweeper(held.tracer, subject.child_box) if place == "child" else None
            # Bounded by the registry's count: only the shim's can be had before the read.
            if child is None and addr is not None:
                room.check_outside_sweep(held.memory, addr, held.snapshot == "copy", sweep_note)
            allocations = find_allocations(got.source, held.memory, mappings, held.threads, child)
            if child is None and addr is None:  # glibc's heap, walked: its count now known
                copied = isinstance(held.memory, _native.MemoryCopy)
                room.check_sweep_of(allocations.registry.count, copied, sweep_note)
            note("allocations")
            roots = find_roots(held.memory, mappings, held.threads, allocations, inputs)
            over = MarkOver.of(held, mappings)
            team = options.mark_threads or default_team(held.snapshot, facts)
            result = mark(over, allocations, roots, child, team, graph)
            return _Swept(mappings, allocations, roots, result, sweep_note)
        except ChildSweepFailed as e:
            if not e.frozen:  # nothing left to sweep from outside either
                return Retry(str(e), "child", "sweep")
            sweep_note = str(e)
        except MarkReadsTooMuch as e:
            if options.snapshot != "auto":
                raise
            return _reads_too_much(e, planned)
    raise TargetUnscannable(sweep_note)
