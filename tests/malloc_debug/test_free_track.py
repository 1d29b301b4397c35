"""free_track: deferred frees, verification at eviction and exit, double frees."""

from __future__ import annotations

from tests.malloc_debug.support import exe, reports, run, split_backtrace, values

USED = ["  allocation[20] = 0xaf (expected 0xef)", "  allocation[99] = 0x12 (expected 0xef)"]


def test_held_block_is_filled(shim):
    result = run("free_track.c", "held", shim=shim, options="free_track=2")
    assert result.returncode == 0, result.stderr
    assert values(result.stdout)["filled"] == "100"
    assert reports(result.stderr) == []


def test_write_after_free_found_at_eviction(shim):
    result = run("free_track.c", "evict", shim=shim, options="free_track=2")
    assert result.returncode == 0, result.stderr
    ptr = values(result.stdout)["ptr"]
    [report] = reports(result.stderr)
    head, frames = split_backtrace(report, "Backtrace at time of free:")
    assert head == [f"+++ ALLOCATION {ptr} USED AFTER FREE", *USED]
    assert frames[0].group(3) == str(exe("free_track.c"))  # release(), the free site


def test_write_after_free_found_at_exit(shim):
    opts = "free_track=2 free_track_backtrace_num_frames=0"
    result = run("free_track.c", "exit", shim=shim, options=opts)
    assert result.returncode == 0, result.stderr
    ptr = values(result.stdout)["ptr"]
    # no free backtrace was kept
    assert reports(result.stderr) == [[f"+++ ALLOCATION {ptr} USED AFTER FREE", *USED]]


def test_write_after_free_with_guards(shim):
    result = run("free_track.c", "evict", shim=shim, options="free_track=2 guard")
    ptr = values(result.stdout)["ptr"]
    [report] = reports(result.stderr)
    assert report[:3] == [f"+++ ALLOCATION {ptr} USED AFTER FREE", *USED]


def test_corrupted_header_tag(shim):
    result = run("free_track.c", "tag", shim=shim, options="free_track=2 guard")
    assert result.returncode == 0, result.stderr
    ptr = values(result.stdout)["ptr"]
    assert reports(result.stderr) == [
        [f"+++ ALLOCATION {ptr} HAS CORRUPTED HEADER TAG 0x1cc7dc00 AFTER FREE"]
    ]


def test_double_free(shim):
    result = run("free_track.c", "double", shim=shim, options="free_track=2")
    assert result.returncode == 0, result.stderr
    ptr = values(result.stdout)["ptr"]
    [report] = reports(result.stderr)
    assert report[0] == f"+++ ALLOCATION {ptr} USED AFTER FREE (free)"
    _, original = split_backtrace(report, "Backtrace of original free:")
    _, failure = split_backtrace(report, "Backtrace at time of failure:")
    assert original[0].group(3) == failure[0].group(3) == str(exe("free_track.c"))
    assert "done" in result.stdout  # the second free did nothing
