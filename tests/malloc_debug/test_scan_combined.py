"""Every option combined with a scan: the same exact leak totals as without options.

Guards and headers must neither hide nor invent pointers, blocks free_track
holds back must not look live, record_allocs' and free_track's bookkeeping
must not act as roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from unreachable.scan import ScanOptions, scan

SCAN_PROGRAMS = Path(__file__).resolve().parent.parent / "scan" / "programs"

OPTIONS = [
    "",
    "guard",
    "front_guard=48",
    "rear_guard=5",
    "fill",
    "fill_on_alloc",
    "fill_on_free=8",
    "expand_alloc",
    "free_track=10",
    "free_track free_track_backtrace_num_frames=0",
    "fill_on_free=16 free_track=50",
    "leak_track",
    "record_allocs=100000",
    "verify_pointers",
    "abort_on_error",
    "backtrace bt_full bt_dmp_on_ex bt_dmp_pre=/tmp/unreachable-test-heap",
    "bt_en_on_sig",
    "check_unreachable_on_signal log_allocator_stats_on_signal log_allocator_stats_on_exit verbose",
    "guard fill expand_alloc free_track=20 verify_pointers record_allocs leak_track backtrace",
]


def check_exact(target, **kw):
    report = scan(target.pid, ScanOptions(**kw))
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    ), [(hex(e.address), e.size) for e in report.leaks]
    return report


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("program", ["graph.c", "alloc_funcs.c", "big_block.c", "interior.c"])
def test_same_leaks_with_options(targets, options, program):
    target = targets.start(SCAN_PROGRAMS / program, options=options)
    check_exact(target)
    assert target.alive() and target.tracer() == 0


@pytest.mark.parametrize("options", ["guard free_track=30", "fill expand_alloc record_allocs"])
@pytest.mark.parametrize("snapshot", ["fork", "stopped"])
def test_cxx_and_churn(targets, options, snapshot):
    cxx = targets.start(SCAN_PROGRAMS / "cxx.cpp", cxx=True, options=options)
    check_exact(cxx, snapshot=snapshot)
    churn = targets.start(SCAN_PROGRAMS / "churn.c", options=options)
    for _ in range(3):
        check_exact(churn, snapshot=snapshot)
    assert churn.alive()


def test_graph_folding_with_guards(targets):
    target = targets.start(SCAN_PROGRAMS / "graph.c", options="guard fill free_track=10")
    report = check_exact(target)
    # Without backtraces the cycle's two members, of one size, are one entry;
    # each counts only itself (each block is counted under one leak).
    by_total = sorted(
        (e.size, e.referenced_count, e.referenced_size, e.similar_count) for e in report.leaks
    )
    assert by_total == sorted(
        [(40, 2, 48 + 56, 0), (132, 4, 4 * 132, 0), (232, 0, 0, 1), (332, 0, 0, 0)]
    )
