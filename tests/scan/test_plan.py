"""The scan's plan (unreachable/scan/plan.py) chosen from facts alone: no
process is started, nothing is stopped."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import pytest

from unreachable.capture.copy_snapshot import COPY_FROM_BYTES, COPY_MAX_ALLOCATIONS, COW_FROM_BYTES
from unreachable.capture.kept_out_of_fork import KEPT_OUT_PREFER_COPY_BYTES, ForkFlags
from unreachable.errors import InvalidArgument, TargetNotShimmed, TargetUnscannable
from unreachable.scan.facts import Facts
from unreachable.scan.options import ScanOptions
from unreachable.scan.plan import (
    CONCURRENT_FROM_BYTES,
    NO_CHILD_BOX,
    Plan,
    Retry,
    expected_pause_ms,
    plan,
)

MIB = 1 << 20
SMALL = Facts(1, anonymous_bytes=10 * MIB)  # too small for the registry to be read
BIG = replace(SMALL, anonymous_bytes=COPY_FROM_BYTES, allocations=1000)
SNAPSHOTS = ("auto", "fork", "copy", "stopped", "concurrent")
SWEEPS = ("auto", "child", "scanner")


def _kept_out(resident: int, limit: int = 1 << 30) -> ForkFlags:
    return ForkFlags(resident=resident, limit=limit)


def _shape(plans: list[Plan]) -> list[tuple[str, tuple[str, ...]]]:
    return [(p.snapshot, p.sweeps) for p in plans]


def _plan(facts: Facts, snapshot: str = "auto", sweep: str = "auto", graph: bool = False):
    return plan(facts, ScanOptions(snapshot=snapshot, sweep=sweep), graph)  # type: ignore[arg-type]


@pytest.mark.parametrize(("snapshot", "sweep"), list(product(SNAPSHOTS, SWEEPS)))
def test_every_combination_plans_or_refuses_before_the_stop(snapshot, sweep):
    try:
        plans = _plan(SMALL, snapshot, sweep)
    except TargetUnscannable as e:
        # Only an in-child sweep without a snapshot child is refused here.
        assert sweep == "child" and snapshot in ("copy", "stopped", "concurrent"), e
        assert "no in-child sweep without a snapshot child" in str(e)
        return
    assert plans
    first = plans[0]
    if snapshot != "auto":
        assert first.snapshot == snapshot
    if first.snapshot != "fork" or sweep == "scanner":
        assert first.sweeps == ("scanner",)
    else:
        assert first.sweeps == {"auto": ("child", "scanner"), "child": ("child",)}[sweep]
    # An explicit strategy is refused when it cannot be had; auto never is.
    assert bool(first.must) == (snapshot in ("fork", "copy", "concurrent") or sweep == "child")


def test_auto_on_a_small_heap_forks_and_sweeps_in_the_child():
    assert _shape(_plan(SMALL)) == [
        ("fork", ("child", "scanner")),
        ("fork", ("scanner",)),
        ("stopped", ("scanner",)),
    ]


def _untracked(plans: list[Plan]) -> list[Plan]:
    """The plans after a concurrent mark that gave way (or whose writes
    cannot be tracked)."""
    gave_way = Retry("concurrent mark did not converge", "copy", "snapshot")
    return [p for p in plans if not gave_way.skips(p)]


def test_auto_marks_a_big_heap_concurrently_then_copies_or_forks():
    assert _shape(_plan(BIG))[:3] == [
        ("concurrent", ("scanner",)),
        ("copy", ("scanner",)),
        ("fork", ("child", "scanner")),
    ]
    # Taken by auto, it has a fallback: nothing refuses.
    assert _plan(BIG)[0].must == "" == _plan(BIG)[1].must


def test_a_concurrent_mark_gives_way_to_the_pause_of_the_plan_after_it():
    """It gives way to the next plan that needs no tracking (a copy's
    pause grows with the same writes): a fork here, a stopped scan when no
    fork can be had. Asked for, it has nowhere to go."""
    first = _plan(BIG)[0]
    assert (first.give_way_to, first.give_way_ms) == ("fork", expected_pause_ms(BIG, "fork"))
    assert _shape(_untracked(_plan(BIG)))[0] == ("fork", ("child", "scanner"))
    no_room = _plan(replace(BIG, fork_room="the target's memory cgroup has 1 MiB left"))
    assert (no_room[0].snapshot, no_room[0].give_way_to) == ("concurrent", "stopped")
    assert no_room[0].give_way_ms == expected_pause_ms(BIG, "stopped")
    [asked] = _plan(BIG, "concurrent")
    assert asked.give_way_ms is None


def test_auto_marks_concurrently_from_a_heap_where_its_stops_beat_a_fork():
    assert all(p.snapshot != "concurrent" for p in _plan(SMALL))
    big = replace(SMALL, anonymous_bytes=CONCURRENT_FROM_BYTES)
    assert _plan(big)[0].snapshot == "concurrent"
    # It sweeps from here and keeps no graph: not for those who ask otherwise.
    assert _plan(big, sweep="child")[0].snapshot == "fork"
    assert _plan(big, sweep="scanner")[0].snapshot == "fork"
    assert all(p.snapshot != "concurrent" for p in _plan(big, graph=True))


def test_auto_copies_first_where_the_copy_is_copy_on_write():
    """Its one stop is as short as the concurrent mark's, its scan and what
    it holds less: from COW_FROM_BYTES auto copies, whatever the
    allocations and however it sweeps; below that it forks, the copy after
    the fork."""
    for n in (1000, COPY_MAX_ALLOCATIONS + 1, None):
        big = replace(SMALL, anonymous_bytes=COW_FROM_BYTES, allocations=n, cow=True)
        assert _shape(_plan(big))[:2] == [("copy", ("scanner",)), ("fork", ("child", "scanner"))]
        assert all(p.snapshot != "concurrent" for p in _plan(big))
        assert _plan(big, sweep="scanner")[0].snapshot == "copy"
        assert _plan(big, graph=True)[0].snapshot == "copy"
    small = replace(SMALL, cow=True)
    assert [p.snapshot for p in _plan(small)] == ["fork", "fork", "copy", "stopped"]
    # The classic copy holds the heap: the concurrent mark first, as before.
    assert _plan(replace(SMALL, anonymous_bytes=COW_FROM_BYTES))[0].snapshot == "concurrent"


def test_the_copy_on_write_copys_expected_pause_is_its_stop():
    facts = replace(SMALL, anonymous_bytes=1 << 30)
    cow = replace(facts, cow=True)
    assert expected_pause_ms(cow, "copy") < expected_pause_ms(facts, "copy")
    assert expected_pause_ms(cow, "copy") < expected_pause_ms(cow, "concurrent")
    assert expected_pause_ms(cow, "copy") < expected_pause_ms(cow, "fork")
    # Under a budget it comes first, and one it cannot meet is said.
    huge = replace(cow, anonymous_bytes=64 << 30, allocations=COPY_MAX_ALLOCATIONS + 1)
    first = _budget(huge, 10)[0]
    assert first.snapshot == "copy"
    assert "a copy snapshot is expected to pause the target about 96 ms" in first.snapshot_note


def test_auto_forks_millions_of_allocations():
    facts = replace(BIG, allocations=COPY_MAX_ALLOCATIONS + 1)
    assert _untracked(_plan(facts))[0].snapshot == "fork"
    assert _plan(replace(facts, anonymous_bytes=COPY_FROM_BYTES), graph=True)[0].snapshot == "fork"


def test_auto_does_not_copy_when_the_registry_cannot_be_read():
    assert all(p.snapshot != "copy" for p in _plan(replace(BIG, allocations=None)))


def test_much_kept_out_of_forks_takes_a_copy_whatever_the_heap_size():
    facts = replace(SMALL, kept_out=_kept_out(KEPT_OUT_PREFER_COPY_BYTES + 1), allocations=1000)
    assert _shape(_plan(facts))[:2] == [("copy", ("scanner",)), ("fork", ("child", "scanner"))]


def test_kept_out_of_forks_past_what_the_scanner_holds():
    facts = replace(SMALL, kept_out=_kept_out(200 * MIB, limit=100 * MIB), allocations=None)
    [stopped] = _plan(facts)
    assert stopped.snapshot == "stopped"
    assert "keeps 200 MiB out of forks" in stopped.snapshot_note
    # With a copy to try first, the stopped plan is its fallback.
    facts = replace(facts, allocations=1000)
    assert _shape(_plan(facts)) == [("copy", ("scanner",)), ("stopped", ("scanner",))]
    with pytest.raises(TargetUnscannable, match="out of forks.*--snapshot stopped or copy"):
        _plan(facts, "fork")
    with pytest.raises(TargetUnscannable, match="no in-child sweep.*out of forks"):
        _plan(facts, "auto", "child")
    assert _plan(facts, "stopped")[0].snapshot_note == ""


def test_no_room_for_a_child_in_the_targets_cgroup():
    why = "the target's memory cgroup has 1 MiB left"
    facts = replace(SMALL, fork_room=why)
    [stopped] = _plan(facts)
    assert (stopped.snapshot, stopped.snapshot_note) == ("stopped", why)
    # An explicit fork is tried all the same: its own failure says why.
    assert _plan(facts, "fork")[0].snapshot == "fork"
    with pytest.raises(TargetUnscannable, match="no in-child sweep.*1 MiB left"):
        _plan(facts, "auto", "child")


def test_a_shim_without_a_child_box_sweeps_from_here_and_says_why():
    facts = replace(SMALL, child_box=False)
    for sweep in ("auto", "child"):
        first = _plan(facts, "auto", sweep)[0]
        assert (first.snapshot, first.sweeps) == ("fork", ("scanner",))
        assert first.sweep_note == NO_CHILD_BOX
    assert _plan(facts, "auto", "scanner")[0].sweep_note == ""


def test_the_reference_graph_is_swept_from_here():
    for snapshot in ("auto", "fork"):
        assert all(p.sweeps == ("scanner",) for p in _plan(SMALL, snapshot, graph=True))


def test_without_the_shim_glibcs_heap_is_walked_from_a_child_or_a_copy():
    facts = Facts(1, shim=False, no_shim="no shim in pid 1", glibc_heap=True)
    forked, whole = _plan(facts)
    assert (forked.snapshot, forked.allocations) == ("injected fork", "glibc heap")
    assert (whole.snapshot, whole.allocations) == ("whole copy", "glibc heap")
    # Asked for a stopped scan: the copy made while it is stopped.
    assert [(p.snapshot, p.allocations) for p in _plan(facts, "stopped")] == [
        ("whole copy", "glibc heap")
    ]
    # What needs the shim is refused with what to drop instead.
    for snapshot, sweep, graph, drop in (
        ("fork", "auto", False, "--snapshot fork needs the shim's helper thread: drop --snapshot"),
        ("copy", "auto", False, "--snapshot copy needs the shim's helper thread: drop --snapshot"),
        ("concurrent", "auto", False, "--snapshot concurrent needs"),
        ("auto", "child", False, "--sweep child needs the shim's helper thread: drop --sweep"),
        ("auto", "auto", True, "why and retainers needs the shim's allocation registry"),
    ):
        with pytest.raises(TargetNotShimmed, match=drop):
            _plan(facts, snapshot, sweep, graph)
    # A shim that is there but inert, or a secure-execution process: no walk.
    with pytest.raises(TargetNotShimmed, match="inert"):
        _plan(Facts(1, shim=False, no_shim="the shim is inert", glibc_heap=False))


def test_a_core_file_is_its_own_snapshot():
    # What allocator its process used, the core says: the plan only names it.
    core = Facts(1, core=object())  # type: ignore[arg-type]
    assert _shape(_plan(core)) == [("core", ("scanner",))]
    assert _shape(plan(core, ScanOptions(max_pause_ms=1))) == [("core", ("scanner",))]


def test_concurrent_asked_for_has_no_fallback_and_auto_takes_it_under_a_budget():
    """Its own plan kind (the mark runs inside its capture). Asked for, it
    is refused when writes cannot be tracked; auto takes it on a big heap,
    and on a small one under a budget the other plans are expected to
    break, never for a scan that keeps the reference graph."""
    [only] = _plan(BIG, "concurrent")
    assert (only.snapshot, only.sweeps, only.allocations, only.must) == (
        "concurrent",
        ("scanner",),
        "shim registry",
        "no concurrent snapshot: ",
    )
    assert all(p.snapshot != "concurrent" for p in _plan(SMALL))
    assert _plan(BIG)[0].snapshot == "concurrent"
    assert all(p.snapshot != "concurrent" for p in _plan(BIG, graph=True))
    assert any(p.snapshot == "concurrent" for p in _budget(SMALL, 0.01))


def test_concurrent_keeps_no_reference_graph():
    """why and retainers: refused before anything is read of the target,
    shim or none."""
    for facts in (SMALL, Facts(1, shim=False, no_shim="no shim", glibc_heap=True)):
        with pytest.raises(InvalidArgument, match="keeps no reference graph"):
            _plan(facts, "concurrent", graph=True)


def test_concurrent_under_a_budget():
    facts = replace(SMALL, anonymous_bytes=4 << 30)
    assert expected_pause_ms(facts, "copy") < expected_pause_ms(facts, "concurrent")
    assert expected_pause_ms(facts, "concurrent") < expected_pause_ms(facts, "fork")
    assert _budget(facts, 1000, "concurrent") == [
        Plan("concurrent", must="no concurrent snapshot: ")
    ]
    [over] = _budget(facts, 10, "concurrent")
    assert over.snapshot == "concurrent"
    assert "a concurrent snapshot is expected to pause the target about 48 ms" in (
        over.snapshot_note
    )


def _next(plans: list[Plan], retries: list[Retry]) -> list[Plan]:
    """What the scan runs after these retries, as scan/run.py walks the list."""
    left = plans[1:]
    for retry in retries:
        left = [p for p in left if not retry.skips(p)]
    return left


def test_a_child_that_died_is_followed_by_a_new_fork_swept_from_here():
    gone = Retry("the snapshot child vanished", "child", "sweep")
    assert _shape(_next(_plan(SMALL), [gone]))[0] == ("fork", ("scanner",))
    # Asked to sweep in the child only: nothing is left to move to.
    assert _next(_plan(SMALL, "auto", "child"), [gone]) == []
    assert _next(_plan(SMALL, "fork", "child"), [gone]) == []


def test_a_fork_that_lacks_too_much_is_followed_by_a_copy_or_a_stopped_scan():
    kept = Retry("the target keeps 2 mapping(s) out of forks", "fork", "snapshot")
    assert _shape(_next(_plan(SMALL), [kept])) == [("stopped", ("scanner",))]
    facts = replace(SMALL, allocations=1000)
    assert _shape(_next(_plan(facts), [kept])) == [
        ("copy", ("scanner",)),
        ("stopped", ("scanner",)),
    ]
    assert _next(_plan(SMALL, "fork"), [kept]) == []


def test_a_copy_that_cannot_be_had_is_followed_by_a_fork():
    untracked = Retry("no copy snapshot: another scan is copying", "copy", "snapshot")
    assert _shape(_next(_plan(BIG), [untracked]))[0] == ("fork", ("child", "scanner"))


def test_writes_that_cannot_be_tracked_rule_out_the_concurrent_mark_too():
    untracked = Retry("no copy snapshot: another scan is copying", "copy", "snapshot")
    planned = _budget(BIG, 0.01)
    assert {"copy", "concurrent"} <= {p.snapshot for p in planned}
    assert {p.snapshot for p in _next(planned, [untracked])} == {"fork", "stopped"}
    assert untracked.skips(Plan("concurrent"))


def _budget(facts: Facts, max_ms: float, snapshot: str = "auto", sweep: str = "auto"):
    options = ScanOptions(snapshot=snapshot, sweep=sweep, max_pause_ms=max_ms)  # type: ignore[arg-type]
    return plan(facts, options)


def test_expected_pauses_follow_the_memory_held():
    facts = replace(SMALL, anonymous_bytes=1 << 30, kept_out=_kept_out(1 << 30))
    assert expected_pause_ms(facts, "copy") < expected_pause_ms(facts, "stopped")
    assert expected_pause_ms(facts, "fork") > expected_pause_ms(
        replace(facts, kept_out=ForkFlags()), "fork"
    )


def test_a_budget_every_plan_meets_changes_nothing():
    assert _budget(SMALL, 1000) == _plan(SMALL)
    assert _budget(BIG, 1000) == _plan(BIG)


def test_auto_under_a_budget_takes_the_shorter_pause():
    # Millions of allocations: auto forks for the whole scan's sake, but a
    # 4 GiB heap's page-table copy is expected to pause ~120 ms.
    facts = replace(BIG, anonymous_bytes=4 << 30, allocations=COPY_MAX_ALLOCATIONS + 1)
    assert _untracked(_plan(facts))[0].snapshot == "fork"
    plans = _budget(facts, 50)
    assert [p.snapshot for p in plans[:2]] == ["concurrent", "copy"]
    assert plans[0].snapshot_note == plans[1].snapshot_note == ""
    # The fallbacks over the budget say so, shortest pause first.
    assert [p.snapshot for p in plans[2:]] == ["fork", "fork", "stopped"]
    assert all("more than --max-pause 50 ms" in p.snapshot_note for p in plans[2:])
    # Under a budget the concurrent mark is expected to break, the copy comes first.
    plans = _budget(facts, 30)
    assert [p.snapshot for p in plans[:2]] == ["copy", "concurrent"]
    assert "more than --max-pause 30 ms" in plans[1].snapshot_note
    # Unknown allocations (a heap too small to read them for): the copy is planned all the same.
    assert _budget(replace(facts, allocations=None), 30)[0].snapshot == "copy"


def test_a_budget_nothing_meets_is_said():
    facts = replace(BIG, anonymous_bytes=64 << 30)  # a copy's walk alone ~320 ms
    first = _budget(facts, 1)[0]
    assert first.snapshot == "copy"
    assert "a copy snapshot is expected to pause the target about 320 ms" in first.snapshot_note
    # An explicit strategy is kept, and says so too.
    stopped = _budget(facts, 1, "stopped")[0]
    assert stopped.snapshot == "stopped" and "more than --max-pause 1 ms" in stopped.snapshot_note
    # An in-child sweep needs its fork: the budget only notes.
    assert [p.snapshot for p in _budget(facts, 1, "auto", "child")] == ["fork"]


def test_a_budget_without_the_shim_is_noted_on_the_injected_fork_and_the_whole_copy():
    facts = Facts(1, shim=False, glibc_heap=True, anonymous_bytes=1 << 30)
    forked, whole = _budget(facts, 10)
    assert "a fork snapshot is expected to pause the target about 30 ms" in forked.snapshot_note
    assert "a stopped scan is expected to pause the target about 350 ms" in whole.snapshot_note


def test_without_the_shim_a_child_is_made_unless_it_lacks_more_than_the_scanner_holds():
    facts = Facts(1, shim=False, no_shim="no shim", glibc_heap=True, anonymous_bytes=1 << 30)
    # Past the size from which a scan under the shim copies: the whole copy
    # would read that memory in its pause too, and the rest besides.
    kept = replace(facts, kept_out=_kept_out(KEPT_OUT_PREFER_COPY_BYTES + 1))
    assert [p.snapshot for p in _plan(kept)] == ["injected fork", "whole copy"]
    # The read is part of the injected fork's expected pause.
    assert expected_pause_ms(kept, "injected fork") > expected_pause_ms(facts, "injected fork")
    [whole] = _plan(replace(facts, kept_out=_kept_out(200 * MIB, limit=100 * MIB)))
    assert whole.snapshot == "whole copy"
    assert "keeps 200 MiB out of forks" in whole.snapshot_note
    assert "more than this scanner may hold" in whole.snapshot_note
